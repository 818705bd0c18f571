// Dense layer forward/backward against a raw KokkosBlas::gemm of the same
// shapes, in the same binary: achieved GFLOP/s and the ratio.
//   build/perf/gpipe_bench_dense --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>
#include <chrono>

#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/layers/dense.hpp"

namespace {

using gpipe::Matrix;
using T = float;

template <class F>
void timed(benchmark::State& state, double flops, F&& body) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    body();
    gpipe::compat::fence("bench");
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

// Args: rows (micro-batch), in, out.
void RawGemm(benchmark::State& state) {
  const auto n = state.range(0), in = state.range(1), out = state.range(2);
  Matrix<T> x("x", n, in), w("w", in, out), y("y", n, out);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(w, 0.25f);
  timed(state, 2.0 * n * in * out, [&] { KokkosBlas::gemm("N", "N", T(1), x, w, T(0), y); });
}

void DenseForward(benchmark::State& state) {
  const auto n = state.range(0), in = state.range(1), out = state.range(2);
  gpipe::Dense<T> layer(0, in, out, gpipe::Init::He);
  gpipe::Vector<T> p("p", layer.parameter_count()), g("g", layer.parameter_count());
  layer.bind(p.data(), g.data());
  layer.initialize(1);
  Matrix<T> x("x", n, in), y("y", n, out);
  Kokkos::deep_copy(x, 0.5f);
  timed(state, 2.0 * n * in * out, [&] { layer.forward({}, x, y); });
}

void DenseBackward(benchmark::State& state) {
  const auto n = state.range(0), in = state.range(1), out = state.range(2);
  gpipe::Dense<T> layer(0, in, out, gpipe::Init::He);
  gpipe::Vector<T> p("p", layer.parameter_count()), g("g", layer.parameter_count());
  layer.bind(p.data(), g.data());
  layer.initialize(1);
  Matrix<T> x("x", n, in), dy("dy", n, out), dx("dx", n, in);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(dy, 0.1f);
  timed(state, 4.0 * n * in * out, [&] { layer.backward({}, x, dy, dx); });
}

void Shapes(benchmark::internal::Benchmark* b) {
  // Quickstart deck (micro-batch 16) and deep deck (micro-batch 32, 256).
  b->Args({16, 784, 512})->Args({16, 512, 256})->Args({32, 1024, 1024})->Args({256, 1024, 1024});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(RawGemm)->Apply(Shapes);
BENCHMARK(DenseForward)->Apply(Shapes);
BENCHMARK(DenseBackward)->Apply(Shapes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    benchmark::Initialize(&argc, argv);
    benchmark::AddCustomContext("kokkos_execution_space", gpipe::ExecSpace::name());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  MPI_Finalize();
  return 0;
}

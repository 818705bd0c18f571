// Dense layer forward/backward against a raw KokkosBlas::gemm of the same
// shapes, in the same binary: achieved GFLOP/s and the ratio to raw gemm
// (counter "of_gemm"; raw gemm runs first for every shape).
//   build/perf/gpipe_bench_dense --benchmark_counters_tabular=true

#include <mpi.h>

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>
#include <map>
#include <tuple>

#include "bench_common.hpp"
#include "gpipe/layers/dense.hpp"

namespace {

using gpipe::Matrix;
using T = float;
using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
std::map<Shape, double> raw_gflops;  // filled by RawGemm

// Args: rows (micro-batch), in, out.
void RawGemm(benchmark::State& state) {
  const auto n = state.range(0), in = state.range(1), out = state.range(2);
  Matrix<T> x("x", n, in), w("w", in, out), y("y", n, out);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(w, 0.25f);
  const double seconds = gpipe::bench::timed(state, [&] { KokkosBlas::gemm("N", "N", T(1), x, w, T(0), y); });
  const double flops = 2.0 * n * in * out;
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, flops * 1e-9);
  raw_gflops[{n, in, out}] = flops * 1e-9 * double(state.iterations()) / seconds;
}

// A Dense layer (model position `index`) with its parameters and (n, in),
// (n, out) buffers.
struct DenseBench {
  gpipe::Dense<T> layer;
  gpipe::Vector<T> p, g;
  Matrix<T> x, y, dy, dx;
  DenseBench(std::int64_t n, std::int64_t in, std::int64_t out, std::int64_t index)
      : layer(gpipe::layer_shape(gpipe::parse_layer("{type: dense, units: " + std::to_string(out) + "}"),
                                 gpipe::Shape{in}, index)),
        p("p", layer.parameter_count()), g("g", layer.parameter_count()),
        x("x", n, in), y("y", n, out), dy("dy", n, out), dx("dx", n, in) {
    layer.bind(p.data(), g.data());
    layer.initialize(1);
    Kokkos::deep_copy(x, 0.5f);
    Kokkos::deep_copy(dy, 0.1f);
  }
};

template <bool Backward>
void DenseLayer(benchmark::State& state) {
  const auto n = state.range(0), in = state.range(1), out = state.range(2);
  DenseBench b(n, in, out, 0);
  const double seconds = gpipe::bench::timed(state, [&] {
    if (Backward)
      b.layer.backward({}, b.x, b.dy, b.dx);
    else
      b.layer.forward({}, b.x, b.y);
  });
  // Backward is two gemms of the forward's size.
  const double gemm_flops = (Backward ? 4.0 : 2.0) * n * in * out;
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, gemm_flops * 1e-9);
  const auto raw = raw_gflops.find({n, in, out});
  if (raw != raw_gflops.end())
    state.counters["of_gemm"] = gemm_flops * 1e-9 * double(state.iterations()) / seconds / raw->second;
}

// The weight gradient dW = x^T dy of a mini-batch of N rows, as M gemms of
// N/M rows accumulated into dW (one per micro-batch: what a cell does today)
// or, at M = 1, one gemm over all N rows (the whole-batch weight gradient
// that fill_drain could run once all output gradients are in).
// Args: N, in, out, M. GFLOP/s of 2 N in out.
void WeightGradient(benchmark::State& state) {
  const auto N = state.range(0), in = state.range(1), out = state.range(2), M = state.range(3);
  const auto rows = N / M;
  Matrix<T> x("x", N, in), dy("dy", N, out), dw("dw", in, out);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(dy, 0.1f);
  gpipe::bench::timed(state, [&] {
    for (std::int64_t m = 0; m < M; ++m) {
      const auto r = std::make_pair(m * rows, (m + 1) * rows);
      KokkosBlas::gemm("T", "N", T(1), Kokkos::subview(x, r, Kokkos::ALL), Kokkos::subview(dy, r, Kokkos::ALL),
                       m == 0 ? T(0) : T(1), dw);
    }
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, 2.0 * N * in * out * 1e-9);
}

void Shapes(benchmark::internal::Benchmark* b) {
  // Quickstart deck (micro-batch 16) and deep deck (micro-batches 32 and 256).
  b->Args({16, 784, 512})->Args({16, 512, 256})->Args({32, 1024, 1024})->Args({256, 1024, 1024});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// Dense forward + backward of the deep deck's 1024 x 1024 layer against the
// micro-batch rows: the GEMM-efficiency curve of the performance model
// (gpipe-plan --gflops, docs/performance-model.md). GFLOP/s counts the
// layer's three gemms, 6 n in out.
void DenseStepRows(benchmark::State& state) {
  const std::int64_t n = state.range(0), in = 1024, out = 1024;
  DenseBench b(n, in, out, 1);  // not the model's first layer: with its input gradient
  gpipe::bench::timed(state, [&] {
    b.layer.forward({}, b.x, b.y);
    b.layer.backward({}, b.x, b.dy, b.dx);
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, 6.0 * double(n * in * out) * 1e-9);
}

BENCHMARK(RawGemm)->Apply(Shapes);
BENCHMARK(DenseStepRows)
    ->RangeMultiplier(2)
    ->Range(1, 512)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(DenseLayer, false)->Name("DenseForward")->Apply(Shapes);
BENCHMARK_TEMPLATE(DenseLayer, true)->Name("DenseBackward")->Apply(Shapes);
// The deep deck (N = 256, 1024 x 1024) and the quickstart's first layer
// (N = 128, 784 x 512) at M = 1, 4, 8.
BENCHMARK(WeightGradient)
    ->Args({256, 1024, 1024, 1})->Args({256, 1024, 1024, 4})->Args({256, 1024, 1024, 8})
    ->Args({128, 784, 512, 1})->Args({128, 784, 512, 8})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

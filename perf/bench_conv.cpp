// conv2d forward/backward against a raw KokkosBlas::gemm of the same im2col
// shape, in the same binary: achieved GFLOP/s (counted as the layer's GEMM
// FLOPs) and the ratio to raw gemm ("of_gemm"; raw gemm runs first).
//   build/perf/gpipe_bench_conv --benchmark_counters_tabular=true

#include <mpi.h>

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>
#include <map>
#include <tuple>

#include "bench_common.hpp"
#include "gpipe/layers/factory.hpp"

namespace {

using gpipe::Matrix;
using T = float;
// Args: micro-batch n, channels C, image side H (= W), filters F, kernel K ('same' padding).
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
std::map<Key, double> raw_gflops;

Key key(const benchmark::State& s) {
  return {s.range(0), s.range(1), s.range(2), s.range(3), s.range(4)};
}

// The forward gemm of the layer: (F, C*K*K) x (C*K*K, n*H*W).
void RawGemm(benchmark::State& state) {
  const auto [n, C, H, F, K] = key(state);
  const std::int64_t rows = n * H * H, taps = C * K * K;
  Matrix<T> cols("cols", taps, rows), w("w", F, taps), out("out", F, rows);
  Kokkos::deep_copy(cols, 0.5f);
  Kokkos::deep_copy(w, 0.25f);
  const double seconds =
      gpipe::bench::timed(state, [&] { KokkosBlas::gemm("N", "N", T(1), w, cols, T(0), out); });
  const double flops = 2.0 * rows * taps * F;
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, flops * 1e-9);
  raw_gflops[key(state)] = flops * 1e-9 * double(state.iterations()) / seconds;
}

template <bool Backward>
void Conv(benchmark::State& state) {
  const auto [n, C, H, F, K] = key(state);
  const auto spec = gpipe::parse_layer("{type: conv2d, filters: " + std::to_string(F) +
                                       ", kernel: " + std::to_string(K) + ", padding: same}");
  auto layer = gpipe::make_layer<T>(gpipe::layer_shape(spec, gpipe::Shape{C, H, H}, 1));
  gpipe::Vector<T> p("p", layer->parameter_count()), g("g", layer->parameter_count());
  layer->bind(p.data(), g.data());
  layer->initialize(1);
  layer->reserve(n);
  Matrix<T> x("x", n, layer->in_features()), y("y", n, layer->out_features());
  Matrix<T> dy("dy", n, layer->out_features()), dx("dx", n, layer->in_features());
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(dy, 0.1f);
  const gpipe::SavedView<T> none;
  const double seconds = gpipe::bench::timed(state, [&] {
    if (Backward)
      layer->backward({}, x, dy, dx, none);
    else
      layer->forward({}, x, y, none);
  });
  // Backward is two gemms of the forward's size (weights and input gradient).
  const double gemm_flops = (Backward ? 4.0 : 2.0) * n * H * H * C * K * K * F;
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, gemm_flops * 1e-9);
  const auto raw = raw_gflops.find(key(state));
  if (raw != raw_gflops.end())
    state.counters["of_gemm"] = gemm_flops * 1e-9 * double(state.iterations()) / seconds / raw->second;
}

void Shapes(benchmark::internal::Benchmark* b) {
  // The CNN deck's two convolutions at micro-batch 16, and a wider one.
  b->Args({16, 1, 28, 16, 5})->Args({16, 16, 14, 32, 5})->Args({16, 32, 14, 64, 3});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(RawGemm)->Apply(Shapes);
BENCHMARK_TEMPLATE(Conv, false)->Name("Conv2dForward")->Apply(Shapes);
BENCHMARK_TEMPLATE(Conv, true)->Name("Conv2dBackward")->Apply(Shapes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

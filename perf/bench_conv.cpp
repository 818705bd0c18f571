// The kernel seam's convolution (gpipe/kernels/conv.hpp) per implementation
// at the CNN deck's shapes (inputs/fashion_mnist_cnn.yaml, 'same' 3x3):
// forward, backward-data and backward-weights (with the bias gradient) as
// GFLOP/s (2 n P C K^2 F each) and "of_gemm", the fraction of the rate of
// one raw KokkosBlas GEMM of the same FLOPs (the forward's (F, C K^2) x
// (C K^2, n P), run first in the same binary), at micro-batch 16 (the
// deck's M = 8) and 128 (M = 1).
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 build/perf/gpipe_bench_conv --benchmark_counters_tabular=true

#include <mpi.h>

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>
#include <map>
#include <tuple>

#include "bench_common.hpp"
#include "gpipe/kernels/conv.hpp"

namespace {

using gpipe::Matrix;
using gpipe::kernels::Implementation;
using T = float;
// Args: micro-batch n, channels C, image side H (= W), filters F, kernel K ('same' padding).
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
std::map<Key, double> raw_gflops;

Key key(const benchmark::State& s) { return {s.range(0), s.range(1), s.range(2), s.range(3), s.range(4)}; }

gpipe::kernels::ConvShape conv_shape(const Key& k) {
  const auto [n, C, H, F, K] = k;
  gpipe::kernels::ConvShape s;
  s.channels = C;
  s.height = s.width = H;
  s.filters = F;
  s.kernel_h = s.kernel_w = K;
  s.pad_h = s.pad_w = (K - 1) / 2;
  return s;
}

double gemm_flops(const Key& k) {
  const auto s = conv_shape(k);
  return 2.0 * double(std::get<0>(k)) * double(s.pixels()) * double(s.taps()) * double(s.filters);
}

// The forward's GEMM as one call: (F, C*K*K) x (C*K*K, n*H*W).
void RawGemm(benchmark::State& state) {
  const auto s = conv_shape(key(state));
  const std::int64_t rows = state.range(0) * s.pixels();
  Matrix<T> cols("cols", s.taps(), rows), w("w", s.filters, s.taps()), out("out", s.filters, rows);
  Kokkos::deep_copy(cols, 0.5f);
  Kokkos::deep_copy(w, 0.25f);
  const double seconds = gpipe::bench::timed(state, [&] { KokkosBlas::gemm("N", "N", T(1), w, cols, T(0), out); });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, gemm_flops(key(state)) * 1e-9);
  raw_gflops[key(state)] = gemm_flops(key(state)) * 1e-9 * double(state.iterations()) / seconds;
}

enum class Pass { forward, data, weights };

template <Pass pass>
void Conv(benchmark::State& state, Implementation impl) {
  if (!gpipe::kernels::has(impl, gpipe::kernels::Primitive::conv2d, int(sizeof(T)))) {
    state.SkipWithError("implementation not built");
    return;
  }
  const auto s = conv_shape(key(state));
  const std::int64_t n = state.range(0);
  gpipe::kernels::Conv2d<T> conv(s, impl);
  conv.reserve(n);
  Matrix<T> x("x", n, s.in_features()), y("y", n, s.out_features()), dy("dy", n, s.out_features());
  Matrix<T> dx("dx", n, s.in_features()), w("w", s.filters, s.taps()), dw("dw", s.filters, s.taps());
  gpipe::Vector<T> b("b", s.filters), db("db", s.filters), saved("saved", conv.saved_per_sample() * n);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(w, 0.25f);
  Kokkos::deep_copy(dy, 0.1f);
  const typename gpipe::kernels::Conv2d<T>::Saved kept(saved.data(), saved.extent(0));
  const typename gpipe::kernels::Conv2d<T>::Bias bias(b.data(), b.extent(0)), dbias(db.data(), db.extent(0));
  const gpipe::ExecSpace space;
  conv.forward(space, x, w, bias, y, kept);  // the saved columns, and oneDNN's primitives
  const double seconds = gpipe::bench::timed(state, [&] {
    if (pass == Pass::forward) conv.forward(space, x, w, bias, y, kept);
    if (pass == Pass::data) conv.backward_data(space, dy, w, dx);
    if (pass == Pass::weights) conv.backward_weights(space, x, dy, kept, dw, dbias, true);
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, gemm_flops(key(state)) * 1e-9);
  const auto raw = raw_gflops.find(key(state));
  if (raw != raw_gflops.end())
    state.counters["of_gemm"] = gemm_flops(key(state)) * 1e-9 * double(state.iterations()) / seconds / raw->second;
}

void Shapes(benchmark::internal::Benchmark* b) {
  // The CNN deck's three convolutions at micro-batch 16 (N = 128, M = 8) and 128 (M = 1).
  for (std::int64_t n : {16, 128}) b->Args({n, 1, 28, 8, 3})->Args({n, 8, 28, 16, 3})->Args({n, 16, 14, 32, 3});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(RawGemm)->Apply(Shapes);
void Forward(benchmark::State& s, Implementation impl) { Conv<Pass::forward>(s, impl); }
void BackwardData(benchmark::State& s, Implementation impl) { Conv<Pass::data>(s, impl); }
void BackwardWeights(benchmark::State& s, Implementation impl) { Conv<Pass::weights>(s, impl); }
BENCHMARK_CAPTURE(Forward, portable, Implementation::portable)->Apply(Shapes);
BENCHMARK_CAPTURE(Forward, onednn, Implementation::onednn)->Apply(Shapes);
BENCHMARK_CAPTURE(BackwardData, portable, Implementation::portable)->Apply(Shapes);
BENCHMARK_CAPTURE(BackwardData, onednn, Implementation::onednn)->Apply(Shapes);
BENCHMARK_CAPTURE(BackwardWeights, portable, Implementation::portable)->Apply(Shapes);
BENCHMARK_CAPTURE(BackwardWeights, onednn, Implementation::onednn)->Apply(Shapes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

// The kernel seam's primitives (gpipe/kernels/) per implementation at the
// decks' shapes, GFLOP/s (2 m n k per GEMM; attention by its documented
// FLOP count), to choose the implementation per primitive and precision
// (src/kernels/backend.cpp; perf/README.md, "Kernel seam"). First argument:
// 0 portable, 1 onednn (skipped in a build without it).
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 build/perf/gpipe_bench_seam --benchmark_counters_tabular=true

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "bench_common.hpp"
#include "gpipe/kernels/attention.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/gemm.hpp"

namespace {

using gpipe::Matrix;
using gpipe::kernels::Choice;
using gpipe::kernels::Op;

// Selects the benchmark's implementation; false (and the benchmark skipped) when not built.
bool choose(benchmark::State& state, gpipe::kernels::Primitive p, int bytes) {
  const auto impl = state.range(0) == 0 ? gpipe::kernels::Implementation::portable : gpipe::kernels::Implementation::onednn;
  if (!gpipe::kernels::has(impl, p, bytes)) {
    state.SkipWithError("implementation not built for this primitive / precision");
    return false;
  }
  gpipe::kernels::select(state.range(0) == 0 ? Choice::portable : Choice::onednn);
  state.SetLabel(gpipe::kernels::name(impl));
  return true;
}

// One untimed call first (oneDNN creates and caches its primitive there), then the timed ones.
template <class F>
void warm_and_time(benchmark::State& state, F&& body) {
  body();
  gpipe::bench::timed(state, body);
}

template <class T>
Matrix<T> filled(std::int64_t r, std::int64_t c, double v) {
  Matrix<T> m("m", r, c);
  Kokkos::deep_copy(m, T(v));
  return m;
}

// Args: impl, m (rows), k (in), n (out). Y = X W + b.
template <class T>
void GemmBias(benchmark::State& state) {
  if (!choose(state, gpipe::kernels::Primitive::gemm_bias, sizeof(T))) return;
  const auto m = state.range(1), k = state.range(2), n = state.range(3);
  const auto x = filled<T>(m, k, 0.5), w = filled<T>(k, n, 0.01), b = filled<T>(1, n, 0.1);
  Matrix<T> y("y", m, n);
  warm_and_time(state, [&] { gpipe::kernels::gemm_bias<T>(gpipe::ExecSpace(), x, w, b, y); });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, 2e-9 * double(m * n * k));
}

// Args: impl, m, k, n, and which: 0 dX = dY W^T (m x k = (m x n)(n x k)), 1 dW = X^T dY (k x n, sum over m).
template <class T>
void GemmBackward(benchmark::State& state) {
  if (!choose(state, gpipe::kernels::Primitive::gemm, sizeof(T))) return;
  const auto m = state.range(1), k = state.range(2), n = state.range(3);
  const auto x = filled<T>(m, k, 0.5), w = filled<T>(k, n, 0.01), dy = filled<T>(m, n, 0.1);
  Matrix<T> dx("dx", m, k), dw("dw", k, n);
  if (state.range(4) == 0)
    warm_and_time(state, [&] {
      gpipe::kernels::gemm<T>(gpipe::ExecSpace(), Op::none, Op::transpose, T(1), dy, w, T(0), dx);
    });
  else
    warm_and_time(state, [&] {
      gpipe::kernels::gemm<T>(gpipe::ExecSpace(), Op::transpose, Op::none, T(1), x, dy, T(1), dw);
    });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, 2e-9 * double(m * n * k));
}

// Args: impl, m (rows per micro-batch), k, n, M (micro-batches), packed.
// One step's parameter products of a Dense layer: M forwards Y = X W + b and
// M input gradients dX = dY W^T, through gemm_bias_weights / gemm_weights;
// packed = 1 runs them in a fresh FrozenWeights scope per iteration (so the
// packing of W in both forms is timed too), 0 outside any scope (plain).
template <class T>
void StepProducts(benchmark::State& state) {
  if (!choose(state, gpipe::kernels::Primitive::gemm_bias, sizeof(T))) return;
  const auto m = state.range(1), k = state.range(2), n = state.range(3), M = state.range(4);
  const bool packed = state.range(5) != 0;
  const auto x = filled<T>(m, k, 0.5), w = filled<T>(k, n, 0.01), b = filled<T>(1, n, 0.1), dy = filled<T>(m, n, 0.1);
  Matrix<T> y("y", m, n), dx("dx", m, k);
  const auto products = [&] {
    for (std::int64_t i = 0; i < M; ++i) {
      gpipe::kernels::gemm_bias_weights<T>(gpipe::ExecSpace(), x, w, b, y);
      gpipe::kernels::gemm_weights<T>(gpipe::ExecSpace(), Op::none, Op::transpose, T(1), dy, w, T(0), dx);
    }
  };
  warm_and_time(state, [&] {
    if (!packed) return products();
    const gpipe::kernels::FrozenWeights frozen;
    products();
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, 4e-9 * double(M * m * n * k));
}

// Args: impl, samples n, tokens T, heads H, head width dh: S = Q K^T over every (sample, head) in qkv.
template <class T>
void BatchedScores(benchmark::State& state) {
  if (!choose(state, gpipe::kernels::Primitive::batched_gemm, sizeof(T))) return;
  const auto n = state.range(1), t = state.range(2), h = state.range(3), dh = state.range(4), d = h * dh;
  const auto qkv = filled<T>(n * t, 3 * d, 0.1);
  Matrix<T> s("s", n * h * t, t);
  const gpipe::kernels::Strided sq{t, dh, 3 * d, t * 3 * d, dh}, ss{t, t, t, h * t * t, t * t};
  warm_and_time(state, [&] {
    gpipe::kernels::batched_gemm<T>(gpipe::ExecSpace(), Op::none, Op::transpose, n, h, T(0.25), qkv.data(), sq,
                                    qkv.data() + d, sq, T(0), s.data(), ss);
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, 2e-9 * double(n * h * t * t * dh));
}

// Args: impl, n, T, H, dh, causal: attention forward + backward.
template <class T>
void Attention(benchmark::State& state) {
  if (!choose(state, gpipe::kernels::Primitive::attention, sizeof(T))) return;
  const auto n = state.range(1), t = state.range(2), h = state.range(3), dh = state.range(4), d = h * dh;
  const gpipe::kernels::AttentionShape shape{n, t, h, dh, state.range(5) != 0};
  const auto qkv = filled<T>(n * t, 3 * d, 0.1), dout = filled<T>(n * t, d, 0.01);
  Matrix<T> probs("p", n * h * t, t), work("w", n * h * t, t), out("o", n * t, d), dqkv("dqkv", n * t, 3 * d);
  warm_and_time(state, [&] {
    gpipe::kernels::attention_forward<T>(gpipe::ExecSpace(), shape, qkv, probs, out);
    gpipe::kernels::attention_backward<T>(gpipe::ExecSpace(), shape, qkv, probs, dout, work, dqkv);
  });
  const double N = double(n), TT = double(t) * double(t);
  state.counters["GFLOP/s"] =
      gpipe::bench::rate(state, 1e-9 * (12 * N * TT * double(d) + 9 * N * double(h) * TT));
}

void DenseShapes(benchmark::internal::Benchmark* b) {
  for (int impl : {0, 1}) {
    // Deep MLP (N = 256, M = 8: 32 rows; M = 1: 256 rows): 784 -> 1024, 1024 -> 1024, 1024 -> 10.
    for (int rows : {32, 256})
      for (auto kn : {std::pair{784, 1024}, std::pair{1024, 1024}, std::pair{1024, 10}})
        b->Args({impl, rows, kn.first, kn.second});
    // ViT (N = 128 of 16 tokens, M = 8: 256 token rows; M = 1: 2048): qkv, proj, mlp1, mlp2.
    for (int rows : {256, 2048})
      for (auto kn : {std::pair{64, 192}, std::pair{64, 64}, std::pair{64, 128}, std::pair{128, 64}})
        b->Args({impl, rows, kn.first, kn.second});
  }
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void BackwardShapes(benchmark::internal::Benchmark* b) {
  for (int impl : {0, 1})
    for (int which : {0, 1}) {
      for (auto kn : {std::pair{784, 1024}, std::pair{1024, 1024}}) b->Args({impl, 32, kn.first, kn.second, which});
      for (auto kn : {std::pair{64, 192}, std::pair{128, 64}}) b->Args({impl, 256, kn.first, kn.second, which});
    }
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void AttentionShapes(benchmark::internal::Benchmark* b) {
  // The ViT deck: T = 16, 4 heads of 16; micro-batch 16 (M = 8) and 128 (M = 1).
  for (int impl : {0, 1})
    for (int n : {16, 128}) b->Args({impl, n, 16, 4, 16});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void AttentionCausalShapes(benchmark::internal::Benchmark* b) {
  for (int impl : {0, 1})
    for (int n : {16, 128})
      for (int causal : {0, 1}) b->Args({impl, n, 16, 4, 16, causal});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(GemmBias, float)->Name("GemmBias<float>")->Apply(DenseShapes);
BENCHMARK_TEMPLATE(GemmBackward, float)->Name("GemmBackward<float>")->Apply(BackwardShapes);
BENCHMARK_TEMPLATE(StepProducts, float)
    ->Name("StepProducts<float>")
    ->Apply([](benchmark::internal::Benchmark* b) {
      // The deep MLP's step at M = 8 (32 rows) and M = 1 (256 rows); the ViT's MLP at M = 1 (2048 token rows).
      for (int impl : {0, 1})
        for (int packed : {0, 1}) {
          for (auto kn : {std::pair{784, 1024}, std::pair{1024, 1024}}) b->Args({impl, 32, kn.first, kn.second, 8, packed});
          b->Args({impl, 256, 1024, 1024, 1, packed});
          b->Args({impl, 2048, 64, 128, 1, packed});
        }
      b->UseManualTime()->Unit(benchmark::kMicrosecond);
    });
BENCHMARK_TEMPLATE(BatchedScores, float)->Name("BatchedScores<float>")->Apply(AttentionShapes);
BENCHMARK_TEMPLATE(Attention, float)->Name("Attention<float>")->Apply(AttentionCausalShapes);
BENCHMARK_TEMPLATE(GemmBias, double)->Name("GemmBias<double>")->Args({0, 256, 64, 192})->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(Attention, double)->Name("Attention<double>")->Args({0, 16, 16, 4, 16, 0})->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

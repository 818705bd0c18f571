// transformer_block forward + backward (one training micro-batch step of the
// layer, saved state in caller-owned storage as the cell passes it):
// achieved GFLOP/s by the layer's own FLOP count (model/shapes.hpp).
//   build/perf/gpipe_bench_transformer --benchmark_counters_tabular=true

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <string>

#include "bench_common.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/layers/layer_norm.hpp"

namespace {

using gpipe::Matrix;

// Args: micro-batch n, tokens T, width d, heads, hidden.
template <class T>
void BlockStep(benchmark::State& state) {
  const auto n = state.range(0), tokens = state.range(1), d = state.range(2);
  const auto spec = gpipe::parse_layer("{type: transformer_block, heads: " + std::to_string(state.range(3)) +
                                       ", hidden: " + std::to_string(state.range(4)) + "}");
  const auto shape = gpipe::layer_shape(spec, gpipe::Shape{tokens, d});
  auto layer = gpipe::make_layer<T>(shape);
  gpipe::Vector<T> p("p", layer->parameter_count()), g("g", layer->parameter_count());
  layer->bind(p.data(), g.data());
  layer->initialize(1);
  layer->reserve(n);
  gpipe::Vector<T> saved("saved", shape.saved.elements(n));
  const gpipe::SavedView<T> s(saved.data(), saved.extent(0));
  Matrix<T> x("x", n, tokens * d), y("y", n, tokens * d), dy("dy", n, tokens * d), dx("dx", n, tokens * d);
  Kokkos::deep_copy(x, T(0.5));
  Kokkos::deep_copy(dy, T(0.1));
  const gpipe::PassContext ctx{};
  gpipe::bench::timed(state, [&] {
    layer->forward(ctx, x, y, s);
    layer->backward(ctx, x, dy, dx, s);
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, shape.flops(n) * 1e-9);
}

void Shapes(benchmark::internal::Benchmark* b) {
  // The Fashion-MNIST ViT deck (micro-batch 16 of 128 in 8), and a wider block.
  // 128: the deck at M = 1.
  b->Args({16, 16, 64, 4, 128})->Args({128, 16, 64, 4, 128})->Args({64, 16, 64, 4, 128})->Args({16, 64, 128, 8, 512});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// LayerNorm forward + backward (input and parameter gradients) on (n, tokens
// x width) rows, by row kernel: 0 one thread per row (the host default), 1
// one team per row (the GPU default, and the host's before issue 21's
// LayerNorm work); the same bits either way.
// Args: n, tokens, width, kernel.
template <class T>
void LayerNormStep(benchmark::State& state) {
  const auto n = state.range(0), tokens = state.range(1), d = state.range(2);
  const auto shape = gpipe::layer_shape(gpipe::parse_layer("{type: layer_norm}"), gpipe::Shape{tokens, d});
  auto made = gpipe::make_layer<T>(shape);
  auto& layer = dynamic_cast<gpipe::LayerNorm<T>&>(*made);
  gpipe::Vector<T> p("p", layer.parameter_count()), g("g", layer.parameter_count());
  layer.bind(p.data(), g.data());
  layer.initialize(1);
  gpipe::Vector<T> saved("saved", shape.saved.elements(n));
  const gpipe::SavedView<T> s(saved.data(), saved.extent(0));
  Matrix<T> x("x", n, tokens * d), y("y", n, tokens * d), dy("dy", n, tokens * d), dx("dx", n, tokens * d);
  Kokkos::parallel_for("bench::fill", Kokkos::RangePolicy<gpipe::ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
    for (std::int64_t e = 0; e < tokens * d; ++e) {
      x(i, e) = T(0.001) * T((i * 7 + e * 13) % 1000);
      dy(i, e) = T(0.01) * T((i * 3 + e * 5) % 100);
    }
  });
  const auto kernel = state.range(3) == 0 ? gpipe::LayerNorm<T>::RowKernel::threads : gpipe::LayerNorm<T>::RowKernel::teams;
  const gpipe::PassContext ctx{};
  gpipe::bench::timed(state, [&] {
    layer.forward_rows(ctx, x, y, s, kernel);
    layer.backward_rows(ctx, x, dy, dx, s, kernel);
  });
  state.counters["GFLOP/s"] = gpipe::bench::rate(state, shape.flops(n) * 1e-9);
}

// The ViT deck's LayerNorms at M = 1 (128 samples of 16 tokens x 64) and M = 8.
BENCHMARK_TEMPLATE(LayerNormStep, float)
    ->Name("LayerNormStep<float>")
    ->Args({128, 16, 64, 0})->Args({128, 16, 64, 1})->Args({16, 16, 64, 0})->Args({16, 16, 64, 1})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_TEMPLATE(BlockStep, float)->Name("TransformerBlockStep<float>")->Apply(Shapes);
BENCHMARK_TEMPLATE(BlockStep, double)->Name("TransformerBlockStep<double>")->Apply(Shapes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

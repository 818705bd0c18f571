// transformer_block forward + backward (one training micro-batch step of the
// layer, saved state in caller-owned storage as the cell passes it):
// achieved GFLOP/s by the layer's own FLOP count (model/shapes.hpp).
//   build/perf/gpipe_bench_transformer --benchmark_counters_tabular=true

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <string>

#include "bench_common.hpp"
#include "gpipe/layers/factory.hpp"

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
  b->Args({16, 16, 64, 4, 128})->Args({64, 16, 64, 4, 128})->Args({16, 64, 128, 8, 512});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(BlockStep, float)->Name("TransformerBlockStep<float>")->Apply(Shapes);
BENCHMARK_TEMPLATE(BlockStep, double)->Name("TransformerBlockStep<double>")->Apply(Shapes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

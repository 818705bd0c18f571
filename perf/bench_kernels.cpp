// Element-wise layers and optimizer updates against a plain Kokkos copy
// kernel of the same size: achieved GB/s and the ratio to the copy
// (counter "of_copy"). Bytes counted: every array read once and written once.
//   build/perf/gpipe_bench_kernels --benchmark_counters_tabular=true

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <map>

#include "bench_common.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/optim/optimizer.hpp"

namespace {

using T = float;
std::map<std::int64_t, double> copy_gbs;  // elements -> GB/s of the copy kernel

// Runs `body`, reporting GB/s for `bytes` per call and its ratio to the copy.
template <class F>
void measure(benchmark::State& state, std::int64_t elements, double bytes, F&& body, bool is_copy = false) {
  const double seconds = gpipe::bench::timed(state, body);
  const double gbs = bytes * 1e-9 * double(state.iterations()) / seconds;
  state.counters["GB/s"] = gbs;
  if (is_copy) {
    copy_gbs[elements] = gbs;  // the latest (longest) run of Copy at this size
    return;
  }
  const auto copy = copy_gbs.find(elements);
  if (copy != copy_gbs.end()) state.counters["of_copy"] = gbs / copy->second;
}

// Arg: rows of a (rows, 1024) activation; elements = rows * 1024.
void Copy(benchmark::State& state) {
  const std::int64_t e = state.range(0) * 1024;
  gpipe::Vector<T> a("a", e), b("b", e);
  measure(state, e, 2.0 * sizeof(T) * e, [&] {
    Kokkos::parallel_for(
        "bench::copy", Kokkos::RangePolicy<gpipe::ExecSpace>(0, e), KOKKOS_LAMBDA(const std::int64_t i) { b(i) = a(i); });
  }, true);
}

template <bool Backward>
void Layer(benchmark::State& state, const char* type) {
  const std::int64_t rows = state.range(0), f = 1024;
  const std::string text = std::string("{type: ") + type + (std::string(type) == "dropout" ? ", rate: 0.1}" : "}");
  auto layer = gpipe::make_layer<T>(gpipe::layer_shape(gpipe::parse_layer(text), gpipe::Shape{f}));
  gpipe::Matrix<T> x("x", rows, f), y("y", rows, f), dy("dy", rows, f), dx("dx", rows, f);
  gpipe::Vector<T> saved("saved", layer->saved_size().elements(rows));
  const gpipe::SavedView<T> s(saved.data(), saved.extent(0));
  Kokkos::deep_copy(x, 0.3f);
  Kokkos::deep_copy(dy, 0.1f);
  const gpipe::PassContext ctx{1, 2, 0, true};
  // forward reads x, writes y; backward reads x and dy, writes dx.
  const double bytes = (Backward ? 3.0 : 2.0) * sizeof(T) * rows * f;
  measure(state, rows * f, bytes, [&] {
    if (Backward)
      layer->backward(ctx, x, dy, dx, s);
    else
      layer->forward(ctx, x, y, s);
  });
}

void LayerForward(benchmark::State& state, const char* type) { Layer<false>(state, type); }
void LayerBackward(benchmark::State& state, const char* type) { Layer<true>(state, type); }

void Optimizer(benchmark::State& state, const char* type) {
  const std::int64_t e = state.range(0) * 1024;
  gpipe::OptimizerSpec spec;
  spec.type = type;
  auto opt = gpipe::make_optimizer<T>(spec, e);
  gpipe::Vector<T> p("p", e), g("g", e);
  Kokkos::deep_copy(g, 0.01f);
  // sgd: p, g, v read, p, v written; adam: p, g, m, v read, p, m, v written.
  const double arrays = std::string(type) == "sgd" ? 5.0 : 7.0;
  measure(state, e, arrays * sizeof(T) * e, [&] { opt->step(p, g, 1e-3); });
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->Arg(32)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(Copy)->Apply(Sizes);
BENCHMARK_CAPTURE(LayerForward, relu_forward, "relu")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerBackward, relu_backward, "relu")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerForward, gelu_forward, "gelu")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerBackward, gelu_backward, "gelu")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerForward, dropout_forward, "dropout")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerForward, layer_norm_forward, "layer_norm")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerBackward, layer_norm_backward, "layer_norm")->Apply(Sizes);
BENCHMARK_CAPTURE(Optimizer, sgd, "sgd")->Apply(Sizes);
BENCHMARK_CAPTURE(Optimizer, adam, "adam")->Apply(Sizes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

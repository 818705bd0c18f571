// Element-wise layers and optimizer updates against a plain Kokkos copy
// kernel of the same size: achieved GB/s and the ratio to the copy
// (counter "of_copy"). Bytes counted: every array read once and written once.
// The reduction kernels restructured for many threads (fixed-order team
// sums: Dense bias gradient, LayerNorm, softmax cross-entropy) run beside
// the one-thread-per-column/row versions they replaced ("*_per_thread").
//   build/perf/gpipe_bench_kernels --benchmark_counters_tabular=true

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <map>

#include "bench_common.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/layers/softmax_cross_entropy.hpp"
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
  // Parameters (LayerNorm's scale and shift) bound and initialized as a cell does.
  gpipe::Vector<T> params("params", layer->parameter_count()), grads("grads", layer->parameter_count());
  layer->bind(params.data(), grads.data());
  layer->initialize(1);
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

// Max pooling 2 x 2 (stride 2) over (rows, 16, 28, 28) images, the CNN
// deck's second convolution's output: forward reads x, writes y and the
// argmax positions (a quarter of x each); backward reads dy and the
// positions, writes dx.
template <bool Backward>
void MaxPool(benchmark::State& state) {
  const std::int64_t rows = state.range(0), f = 16 * 28 * 28, o = f / 4;
  auto layer = gpipe::make_layer<T>(
      gpipe::layer_shape(gpipe::parse_layer("{type: maxpool2d, size: 2}"), gpipe::Shape{16, 28, 28}));
  gpipe::Matrix<T> x("x", rows, f), y("y", rows, o), dy("dy", rows, o), dx("dx", rows, f);
  gpipe::Vector<T> saved("saved", layer->saved_size().elements(rows));
  const gpipe::SavedView<T> s(saved.data(), saved.extent(0));
  Kokkos::parallel_for(
      "bench::fill", Kokkos::RangePolicy<gpipe::ExecSpace>(0, rows * f),
      KOKKOS_LAMBDA(const std::int64_t e) { x(e / f, e % f) = T((e * 7919) % 1000) * 0.001f; });
  Kokkos::deep_copy(dy, 0.1f);
  const gpipe::PassContext ctx{1, 2, 0, true};
  layer->forward(ctx, x, y, s);
  const double bytes = Backward ? sizeof(T) * (2.0 * rows * o + rows * f) : sizeof(T) * (rows * f + 2.0 * rows * o);
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

// Column sums of a (rows, cols) matrix added to a vector: the Dense bias
// gradient (cols = 10: a classifier's last layer; 1024: a hidden layer).
// Args: rows, cols. The restructured kernel (one team per column, fixed
// lanes over rows) against the one-thread-per-column loop it replaced.
template <bool Teams>
void BiasGradient(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = state.range(1);
  gpipe::Matrix<T> dy("dy", rows, cols);
  gpipe::Vector<T> db("db", cols);
  Kokkos::deep_copy(dy, 0.1f);
  measure(state, -1, double(sizeof(T)) * rows * cols, [&] {
    if (Teams) {
      gpipe::add_column_sums<T>("bench::bias_gradient", gpipe::ExecSpace(), rows, cols, db,
                                KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { return dy(i, j); });
    } else {
      Kokkos::parallel_for(
          "bench::bias_gradient_per_thread", Kokkos::RangePolicy<gpipe::ExecSpace>(0, cols),
          KOKKOS_LAMBDA(const std::int64_t j) {
            T sum = T(0);
            for (std::int64_t i = 0; i < rows; ++i) sum += dy(i, j);
            db(j) += sum;
          });
    }
  });
}

// LayerNorm row statistics as before the restructuring: one thread per row,
// three sequential passes over its features (forward's first kernel).
void LayerNormStatisticsPerThread(benchmark::State& state) {
  const std::int64_t rows = state.range(0), f = 1024;
  gpipe::Matrix<T> x("x", rows, f), stats("stats", rows, 2);
  Kokkos::deep_copy(x, 0.3f);
  measure(state, -1, double(sizeof(T)) * rows * f, [&] {
    Kokkos::parallel_for(
        "bench::layer_norm_statistics_per_thread", Kokkos::RangePolicy<gpipe::ExecSpace>(0, rows),
        KOKKOS_LAMBDA(const std::int64_t i) {
          double s = 0, mu = 0, var = 0;
          for (std::int64_t j = 0; j < f; ++j) {
            const double a = double(x(i, j)) < 0 ? -double(x(i, j)) : double(x(i, j));
            s = a > s ? a : s;
          }
          if (s == 0) s = 1;
          for (std::int64_t j = 0; j < f; ++j) mu += double(x(i, j)) / s;
          mu /= double(f);
          for (std::int64_t j = 0; j < f; ++j) var += (double(x(i, j)) / s - mu) * (double(x(i, j)) / s - mu);
          stats(i, 0) = T(s * mu);
          stats(i, 1) = T(s * gpipe::compat::sqrt(var / double(f) + 1e-5 / s / s));
        });
  });
}

// Softmax cross-entropy with its gradient on (rows, classes) logits.
// Args: rows, classes. The loss (one team per row, one totals kernel, one
// copy to the host) against the per-row loop with three blocking
// parallel_reduce calls it replaced.
template <bool Teams>
void SoftmaxCrossEntropy(benchmark::State& state) {
  const std::int64_t n = state.range(0), c = state.range(1);
  gpipe::Matrix<T> z("z", n, c), dz("dz", n, c);
  gpipe::LabelVector labels("labels", n);
  Kokkos::parallel_for(
      "bench::fill", Kokkos::RangePolicy<gpipe::ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        labels(i) = std::int32_t(i % c);
        for (std::int64_t j = 0; j < c; ++j) z(i, j) = T(0.01) * T((i * 7 + j * 3) % 11);
      });
  gpipe::SoftmaxCrossEntropy<T> loss;
  Kokkos::View<double*, gpipe::MemSpace> row_loss("row_loss", n);
  Kokkos::View<std::int32_t*, gpipe::MemSpace> row_hit("row_hit", n);
  const T scale = T(1) / T(n);
  measure(state, -1, 2.0 * sizeof(T) * n * c, [&] {
    if (Teams) {
      benchmark::DoNotOptimize(loss.evaluate(z, labels, scale, dz));
      return;
    }
    Kokkos::parallel_for(
        "bench::softmax_per_thread", Kokkos::RangePolicy<gpipe::ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
          const std::int32_t label = labels(i);
          T zmax = z(i, 0);
          std::int64_t arg = 0;
          for (std::int64_t j = 1; j < c; ++j)
            if (z(i, j) > zmax) {
              zmax = z(i, j);
              arg = j;
            }
          T sum = T(0);
          for (std::int64_t j = 0; j < c; ++j) sum += gpipe::compat::exp(z(i, j) - zmax);
          row_loss(i) = double(gpipe::compat::log(sum)) - (double(z(i, label)) - double(zmax));
          row_hit(i) = arg == label ? 1 : 0;
          for (std::int64_t j = 0; j < c; ++j)
            dz(i, j) = scale * (gpipe::compat::exp(z(i, j) - zmax) / sum - (j == label ? T(1) : T(0)));
        });
    double total = 0;
    std::int64_t hits = 0, bad = 0;
    Kokkos::parallel_reduce(
        "bench::sum_loss", Kokkos::RangePolicy<gpipe::ExecSpace>(0, n),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) { acc += row_loss(i); }, total);
    Kokkos::parallel_reduce(
        "bench::sum_correct", Kokkos::RangePolicy<gpipe::ExecSpace>(0, n),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) { acc += row_hit(i) > 0 ? 1 : 0; }, hits);
    Kokkos::parallel_reduce(
        "bench::count_bad", Kokkos::RangePolicy<gpipe::ExecSpace>(0, n),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) { acc += row_hit(i) < 0 ? 1 : 0; }, bad);
    benchmark::DoNotOptimize(total + double(hits + bad));
  });
}

void ReductionShapes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t rows : {32, 256, 4096})
    for (const std::int64_t cols : {10, 1024}) b->Args({rows, cols});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
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
BENCHMARK_TEMPLATE(MaxPool, false)->Name("MaxPool2x2_forward")->Arg(32)->Arg(128);
BENCHMARK_TEMPLATE(MaxPool, true)->Name("MaxPool2x2_backward")->Arg(32)->Arg(128);
BENCHMARK_CAPTURE(LayerForward, layer_norm_forward, "layer_norm")->Apply(Sizes);
BENCHMARK_CAPTURE(LayerBackward, layer_norm_backward, "layer_norm")->Apply(Sizes);
BENCHMARK(LayerNormStatisticsPerThread)->Apply(Sizes);
BENCHMARK_TEMPLATE(BiasGradient, true)->Apply(ReductionShapes);
BENCHMARK_TEMPLATE(BiasGradient, false)->Name("BiasGradient_per_thread")->Apply(ReductionShapes);
BENCHMARK_TEMPLATE(SoftmaxCrossEntropy, true)->Apply(ReductionShapes);
BENCHMARK_TEMPLATE(SoftmaxCrossEntropy, false)->Name("SoftmaxCrossEntropy_per_thread")->Apply(ReductionShapes);
BENCHMARK_CAPTURE(Optimizer, sgd, "sgd")->Apply(Sizes);
BENCHMARK_CAPTURE(Optimizer, adam, "adam")->Apply(Sizes);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

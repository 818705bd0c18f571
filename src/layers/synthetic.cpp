// synthetic: an emulated layer that sleeps a prescribed time per sample and
// copies its input (include/gpipe/layers/synthetic.hpp).
//   {type: synthetic, units: 64, forward_us: 20, backward_input_us: 20,
//    backward_weights_us: 20, params: 0}

#include "gpipe/layers/synthetic.hpp"
#include "gpipe/core/precision.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

namespace {
using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;
thread_local double owed_seconds = 0;  // overslept by earlier calls on this thread

// Linux delays a sleeping thread's wake-up by up to its timer slack (50 us by
// default) to batch wake-ups; 1 us makes a sleep end within ~10-20 us of its
// deadline (measured here), so an emulated op's end is that much closer to
// its prescribed time. Once per thread; elsewhere a no-op.
void tighten_timer_slack() {
#ifdef __linux__
  thread_local bool done = false;
  if (!done) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  done = true;
#endif
}
}  // namespace

void emulate_compute(double seconds) { emulate_compute(seconds, Clock::now()); }

void emulate_compute(double seconds, std::chrono::steady_clock::time_point since) {
  // What is left of `seconds` after the time spent since `since` and what
  // earlier calls overslept; a negative rest is owed to the next call.
  const auto start = Clock::now();
  const double wait = seconds - Seconds(start - since).count() - owed_seconds;
  if (wait <= 0) {
    owed_seconds = -wait;
    return;
  }
  tighten_timer_slack();
  std::this_thread::sleep_for(Seconds(wait));
  owed_seconds = std::max(0.0, Seconds(Clock::now() - start).count() - wait);
}

void reset_emulated_compute() { owed_seconds = 0; }

namespace {
// out = in on the first min(in, out) columns, 0 on the others.
template <class T>
void copy_columns(const ExecSpace& space, ConstMatrix<T> in, Matrix<T> out, const char* label) {
  const std::int64_t n = std::int64_t(out.extent(0)), cols = std::int64_t(out.extent(1));
  const std::int64_t common = std::min(cols, std::int64_t(in.extent(1)));
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, n * cols), KOKKOS_LAMBDA(const std::int64_t e) {
        const std::int64_t i = e / cols, j = e % cols;
        out(i, j) = j < common ? in(i, j) : T(0);
      });
}

double per_rows(double us, std::int64_t rows) { return double(rows) * us * 1e-6; }

// The copy is part of the op's prescribed time: it runs first (on the pass's
// execution-space instance, fenced), then the op sleeps what is left.
template <class T>
void copy_then_wait(const PassContext& ctx, ConstMatrix<T> in, Matrix<T> out, double seconds,
                    const char* label) {
  const auto start = Clock::now();
  if (out.extent(0) > 0) {
    copy_columns<T>(ctx.space, in, out, label);
    compat::fence(ctx.space, label);
  }
  emulate_compute(seconds, start);
}
}  // namespace

template <class T>
Synthetic<T>::Synthetic(const LayerShape& shape)
    : Layer<T>(shape), config_(shape.spec.as<SyntheticConfig>()) {}

template <class T>
void Synthetic<T>::forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) {
  copy_then_wait<T>(ctx, x, y, per_rows(config_.forward_us, std::int64_t(x.extent(0))),
                    "gpipe::Synthetic::forward");
}

template <class T>
void Synthetic<T>::backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                            SavedView<T>) {
  copy_then_wait<T>(ctx, dy, dx,
                    per_rows(config_.backward_input_us + config_.backward_weights_us,
                             std::int64_t(dy.extent(0))),
                    "gpipe::Synthetic::backward");
}

template <class T>
void Synthetic<T>::backward_input(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy,
                                  Matrix<T> dx, SavedView<T>) {
  copy_then_wait<T>(ctx, dy, dx, per_rows(config_.backward_input_us, std::int64_t(dy.extent(0))),
                    "gpipe::Synthetic::backward_input");
}

template <class T>
void Synthetic<T>::backward_weights(const PassContext&, ConstMatrix<T>, ConstMatrix<T> dy,
                                    SavedView<T>) {
  emulate_compute(per_rows(config_.backward_weights_us, std::int64_t(dy.extent(0))));
}

#define GPIPE_INSTANTIATE(T) template class Synthetic<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

namespace {
LayerEntry synthetic_entry() {
  LayerEntry e;
  e.name = "synthetic";
  e.splits_backward = true;  // Synthetic::backward_input / backward_weights
  e.keys = {"units", "forward_us", "backward_input_us", "backward_weights_us", "params"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    constexpr double inf = std::numeric_limits<double>::infinity();
    constexpr const char* time = "a finite number >= 0 (microseconds per sample)";
    auto c = std::make_shared<SyntheticConfig>();
    c->units = k.required_integer("units", 1, "a positive integer");
    c->forward_us = k.number("forward_us", 0.0, 0.0, inf, true, time);
    c->backward_input_us = k.number("backward_input_us", c->forward_us, 0.0, inf, true, time);
    c->backward_weights_us = k.number("backward_weights_us", c->forward_us, 0.0, inf, true, time);
    c->params = k.integer("params", 0, 0, "an integer >= 0");
    return c;
  };
  e.output_shape = [](const LayerConfig& c, const Shape&) {
    return Shape{static_cast<const SyntheticConfig&>(c).units};
  };
  e.parameters = [](const LayerConfig& c, const Shape&) {
    const auto p = static_cast<const SyntheticConfig&>(c).params;
    return p > 0 ? std::vector<ParameterSpec>{{"weight", 1, p}} : std::vector<ParameterSpec>{};
  };
  e.flops = [](const LayerConfig&, const Shape&, const Shape&, std::int64_t, bool) { return 0.0; };
  return with_factories<Synthetic>(e);
}
}  // namespace

GPIPE_LAYER_ENTRIES(synthetic) { return {synthetic_entry()}; }

}  // namespace gpipe

#include "gpipe/optim/optimizer.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include <cmath>

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

const std::vector<std::string>& optimizer_types() {
  static const std::vector<std::string> types = {"sgd", "adam", "adamw"};
  return types;
}

template <class T>
Sgd<T>::Sgd(const OptimizerSpec& spec, std::int64_t size)
    : spec_(spec), v_("gpipe::Sgd::velocity", size) {}

template <class T>
void Sgd<T>::step(Vector<T> p, ConstVector<T> g, double lr) {
  auto v = v_;
  const T mu = T(spec_.momentum), wd = T(spec_.weight_decay), rate = T(lr);
  Kokkos::parallel_for(
      "gpipe::Sgd::step", Kokkos::RangePolicy<ExecSpace>(this->space_, 0, p.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        v(i) = mu * v(i) + g(i) + wd * p(i);
        p(i) -= rate * v(i);
      });
  ++this->steps_;
}

template <class T>
Adam<T>::Adam(const OptimizerSpec& spec, std::int64_t size, bool decoupled)
    : spec_(spec), decoupled_(decoupled), m_("gpipe::Adam::m", size), v_("gpipe::Adam::v", size) {}

template <class T>
void Adam<T>::step(Vector<T> p, ConstVector<T> g, double lr) {
  ++this->steps_;
  const double t = double(this->steps_);
  const T b1 = T(spec_.beta1), b2 = T(spec_.beta2), eps = T(spec_.eps), rate = T(lr);
  const T c1 = T(1.0 / (1.0 - std::pow(spec_.beta1, t)));
  const T c2 = T(1.0 / (1.0 - std::pow(spec_.beta2, t)));
  const T l2 = decoupled_ ? T(0) : T(spec_.weight_decay);
  const T decay = decoupled_ ? T(lr * spec_.weight_decay) : T(0);
  auto m = m_;
  auto v = v_;
  Kokkos::parallel_for(
      "gpipe::Adam::step", Kokkos::RangePolicy<ExecSpace>(this->space_, 0, p.extent(0)),
      // One flat range over the contiguous buffers, no per-element branch
      // (Adam and AdamW differ only in l2 and decay, one of them 0), the
      // bias corrections c1, c2 computed once: the loop vectorizes (the
      // file is built with -fno-math-errno for the sqrt, CMakeLists.txt).
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T pi = p(i);
        const T gi = g(i) + l2 * pi;
        const T mi = b1 * m(i) + (T(1) - b1) * gi;
        const T vi = b2 * v(i) + (T(1) - b2) * gi * gi;
        m(i) = mi;
        v(i) = vi;
        p(i) = pi - (rate * (mi * c1) / (compat::sqrt(vi * c2) + eps) + decay * pi);
      });
}

template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(const OptimizerSpec& spec, std::int64_t size) {
  require(spec.lr > 0, fmt::format("optimizer.lr: expected a positive value, got {}", spec.lr));
  require(spec.weight_decay >= 0, fmt::format("optimizer.weight_decay: expected a value >= 0, got {}",
                                              spec.weight_decay));
  require(spec.warmup_steps >= 0,
          fmt::format("optimizer.warmup_steps: expected an integer >= 0, got {}", spec.warmup_steps));
  require(spec.clip_norm >= 0 && std::isfinite(spec.clip_norm),
          fmt::format("optimizer.clip_norm: expected a finite value >= 0 (0: off), got {}", spec.clip_norm));
  require(spec.schedule == "constant" || spec.schedule == "cosine",
          fmt::format("optimizer.schedule: unknown schedule '{}' (expected constant or cosine)",
                      spec.schedule));
  if (spec.type == "sgd") {
    require(spec.momentum >= 0 && spec.momentum < 1,
            fmt::format("optimizer.momentum: expected a value in [0, 1), got {}", spec.momentum));
    return std::make_unique<Sgd<T>>(spec, size);
  }
  if (spec.type == "adam" || spec.type == "adamw") {
    require(spec.beta1 >= 0 && spec.beta1 < 1,
            fmt::format("optimizer.beta1: expected a value in [0, 1), got {}", spec.beta1));
    require(spec.beta2 >= 0 && spec.beta2 < 1,
            fmt::format("optimizer.beta2: expected a value in [0, 1), got {}", spec.beta2));
    require(spec.eps > 0, fmt::format("optimizer.eps: expected a positive value, got {}", spec.eps));
    return std::make_unique<Adam<T>>(spec, size, spec.type == "adamw");
  }
  throw InputError(fmt::format("optimizer.type: unknown optimizer '{}' (expected one of: {})",
                               spec.type, fmt::join(optimizer_types(), ", ")));
}

double learning_rate(const OptimizerSpec& spec, std::int64_t step, std::int64_t total_steps,
                     std::int64_t unit) {
  // Progress `step` and horizon `total_steps` are in units of which one
  // step covers `unit` (1: steps; the batch size: samples).
  const double w = double(spec.warmup_steps) * double(unit);
  if (w > 0 && double(step) < w) return spec.lr * (double(step) + double(unit)) / w;
  if (spec.schedule != "cosine" || double(total_steps) <= w) return spec.lr;
  const double pi = 3.14159265358979323846;
  return spec.lr * 0.5 * (1.0 + std::cos(pi * (double(step) - w) / (double(total_steps) - w)));
}

#define GPIPE_INSTANTIATE(T) template class Sgd<T>; template class Adam<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE
#define GPIPE_INSTANTIATE_FUNCTIONS(T) \
  template std::unique_ptr<Optimizer<T>> make_optimizer<T>(const OptimizerSpec&, std::int64_t);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE_FUNCTIONS)
#undef GPIPE_INSTANTIATE_FUNCTIONS

}  // namespace gpipe

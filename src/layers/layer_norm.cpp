#include "gpipe/layers/layer_norm.hpp"

#include <fmt/format.h>

#include <limits>

#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
LayerNorm<T>::LayerNorm(const LayerShape& shape)
    : Layer<T>(shape), eps_(shape.spec.as<LayerNormConfig>().eps) {}

template <class T>
void LayerNorm<T>::bind(T* values, T* gradients) {
  const auto f = this->in_features();
  gamma_ = Unmanaged(values, f);
  beta_ = Unmanaged(values + f, f);
  gamma_grad_ = Unmanaged(gradients, f);
  beta_grad_ = Unmanaged(gradients + f, f);
}

template <class T>
void LayerNorm<T>::initialize(std::uint64_t) {
  auto g = gamma_;
  auto b = beta_;
  Kokkos::parallel_for(
      "gpipe::LayerNorm::initialize", Kokkos::RangePolicy<ExecSpace>(0, this->in_features()),
      KOKKOS_LAMBDA(const std::int64_t j) {
        g(j) = T(1);
        b(j) = T(0);
      });
}

namespace {
// Writes mean and sqrt(var + eps) of each row of x into stats(i, 0..1),
// scale-safe (DESIGN.md "Numerics"): in double, each row divided by its
// largest |x| (s) before anything is squared, so neither the squares nor
// eps / s^2 overflow or underflow to a wrong variance at any finite magnitude.
template <class T, class Stats>
void row_statistics(ConstMatrix<T> x, Stats stats, double eps) {
  const std::int64_t f = std::int64_t(x.extent(1));
  Kokkos::parallel_for(
      "gpipe::LayerNorm::row_statistics", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        double s = 0;
        for (std::int64_t j = 0; j < f; ++j) {
          const double a = double(x(i, j)) < 0 ? -double(x(i, j)) : double(x(i, j));
          s = a > s ? a : s;
        }
        if (s == 0) s = 1;
        double mu = 0;  // mean of x / s
        for (std::int64_t j = 0; j < f; ++j) mu += double(x(i, j)) / s;
        mu /= double(f);
        double var = 0;  // variance of x / s
        for (std::int64_t j = 0; j < f; ++j) {
          const double d = double(x(i, j)) / s - mu;
          var += d * d;
        }
        var /= double(f);
        // sqrt(s^2 var + eps), arranged so neither s^2 nor eps / s^2 overflows.
        const double sd = s >= 1 ? s * compat::sqrt(var + eps / s / s) : compat::sqrt(s * s * var + eps);
        stats(i, 0) = T(s * mu);
        stats(i, 1) = T(sd);
      });
}
}  // namespace

template <class T>
void LayerNorm<T>::forward(const PassContext&, ConstMatrix<T> x, Matrix<T> y,
                           SavedView<T> saved) {
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  const auto stats = unmanaged_matrix(saved.data(), n, 2);
  row_statistics<T>(x, stats, eps_);
  auto g = gamma_;
  auto b = beta_;
  Kokkos::parallel_for(
      "gpipe::LayerNorm::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {n, f}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const double xhat = (double(x(i, j)) - double(stats(i, 0))) / double(stats(i, 1));
        y(i, j) = T(xhat) * g(j) + b(j);
      });
}

template <class T>
void LayerNorm<T>::backward(const PassContext&, ConstMatrix<T> x, ConstMatrix<T> dy,
                            Matrix<T> dx, SavedView<T> saved) {
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  const auto stats = unmanaged_matrix(saved.data(), n, 2);  // written by forward
  auto g = gamma_;
  auto dg = gamma_grad_;
  auto db = beta_grad_;
  // Parameter gradients: one thread per feature, rows in a fixed order.
  Kokkos::parallel_for(
      "gpipe::LayerNorm::backward_parameters", Kokkos::RangePolicy<ExecSpace>(0, f),
      KOKKOS_LAMBDA(const std::int64_t j) {
        T sg = T(0), sb = T(0);
        for (std::int64_t i = 0; i < n; ++i) {
          const T xhat = T((double(x(i, j)) - double(stats(i, 0))) / double(stats(i, 1)));
          sg += dy(i, j) * xhat;
          sb += dy(i, j);
        }
        dg(j) += sg;
        db(j) += sb;
      });
  if (dx.extent(0) == 0) return;
  // dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sd, dxhat = dy * gamma, in double.
  Kokkos::parallel_for(
      "gpipe::LayerNorm::backward_input", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const double mean = double(stats(i, 0)), sd = double(stats(i, 1));
        double m1 = 0, m2 = 0;
        for (std::int64_t j = 0; j < f; ++j) {
          const double dxhat = double(dy(i, j)) * double(g(j));
          m1 += dxhat;
          m2 += dxhat * (double(x(i, j)) - mean) / sd;
        }
        m1 /= double(f);
        m2 /= double(f);
        for (std::int64_t j = 0; j < f; ++j) {
          const double xhat = (double(x(i, j)) - mean) / sd;
          dx(i, j) = T((double(dy(i, j)) * double(g(j)) - m1 - xhat * m2) / sd);
        }
      });
}

template class LayerNorm<float>;
template class LayerNorm<double>;

namespace {
LayerEntry layer_norm_entry() {
  LayerEntry e;
  e.name = "layer_norm";
  e.keys = {"eps"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<LayerNormConfig>();
    c->eps = k.number("eps", 1e-5, 0.0, std::numeric_limits<double>::infinity(), false, "a positive number");
    if (c->eps <= 0) k.fail("eps", fmt::format("expected a positive number, got {}", c->eps));
    return c;
  };
  e.output_shape = [](const LayerConfig&, const Shape& in) {
    if (in.rank() != 1) throw ShapeMismatch("(features)");
    return in;
  };
  e.parameters = [](const LayerConfig&, const Shape& in) {
    return std::vector<ParameterSpec>{{"gamma", 1, in.size()}, {"beta", 1, in.size()}};
  };
  e.saved = [](const LayerConfig&, const Shape&) { return SavedSize{2, 0}; };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    return (input_gradient ? 20.0 : 12.0) * double(batch) * double(in.size());
  };
  return with_factories<LayerNorm>(e);
}
}  // namespace

GPIPE_LAYER_ENTRIES(layer_norm) { return {layer_norm_entry()}; }

}  // namespace gpipe

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
// Writes mean and 1/sqrt(var + eps) of each row of x into stats(i, 0..1).
template <class T, class Stats>
void row_statistics(ConstMatrix<T> x, Stats stats, T eps) {
  const std::int64_t f = std::int64_t(x.extent(1));
  Kokkos::parallel_for(
      "gpipe::LayerNorm::row_statistics", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        T mean = T(0);
        for (std::int64_t j = 0; j < f; ++j) mean += x(i, j);
        mean /= T(f);
        T var = T(0);
        for (std::int64_t j = 0; j < f; ++j) var += (x(i, j) - mean) * (x(i, j) - mean);
        var /= T(f);
        stats(i, 0) = mean;
        stats(i, 1) = T(1) / compat::sqrt(var + eps);
      });
}
}  // namespace

template <class T>
void LayerNorm<T>::forward(const PassContext&, ConstMatrix<T> x, Matrix<T> y,
                           SavedView<T> saved) {
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  const auto stats = unmanaged_matrix(saved.data(), n, 2);
  row_statistics<T>(x, stats, T(eps_));
  auto g = gamma_;
  auto b = beta_;
  Kokkos::parallel_for(
      "gpipe::LayerNorm::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {n, f}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        y(i, j) = (x(i, j) - stats(i, 0)) * stats(i, 1) * g(j) + b(j);
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
          const T xhat = (x(i, j) - stats(i, 0)) * stats(i, 1);
          sg += dy(i, j) * xhat;
          sb += dy(i, j);
        }
        dg(j) += sg;
        db(j) += sb;
      });
  if (dx.extent(0) == 0) return;
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
  Kokkos::parallel_for(
      "gpipe::LayerNorm::backward_input", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T mean = stats(i, 0), rstd = stats(i, 1);
        T m1 = T(0), m2 = T(0);
        for (std::int64_t j = 0; j < f; ++j) {
          const T dxhat = dy(i, j) * g(j);
          m1 += dxhat;
          m2 += dxhat * (x(i, j) - mean) * rstd;
        }
        m1 /= T(f);
        m2 /= T(f);
        for (std::int64_t j = 0; j < f; ++j) {
          const T xhat = (x(i, j) - mean) * rstd;
          dx(i, j) = rstd * (dy(i, j) * g(j) - m1 - xhat * m2);
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

#include "gpipe/layers/layer_norm.hpp"

#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
LayerNorm<T>::LayerNorm(std::int64_t index, std::int64_t features, double eps)
    : Layer<T>(index, features, features), eps_(eps) {}

template <class T>
std::vector<ParameterSpec> LayerNorm<T>::parameter_specs() const {
  return {{"gamma", 1, this->in_features()}, {"beta", 1, this->in_features()}};
}

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
void LayerNorm<T>::forward(const PassContext&, ConstMatrix<T> x, Matrix<T> y) {
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  if (std::int64_t(row_stats_.extent(0)) < n)
    row_stats_ = decltype(row_stats_)(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                         "gpipe::LayerNorm::row_stats"),
                                      n, 2);
  auto stats = row_stats_;
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
                            Matrix<T> dx) {
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  if (std::int64_t(row_stats_.extent(0)) < n)
    row_stats_ = decltype(row_stats_)(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                         "gpipe::LayerNorm::row_stats"),
                                      n, 2);
  auto stats = row_stats_;
  row_statistics<T>(x, stats, T(eps_));
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

template <class T>
double LayerNorm<T>::count_flops(std::int64_t batch, bool input_gradient) const {
  return (input_gradient ? 20.0 : 12.0) * double(batch) * double(this->in_features());
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace gpipe

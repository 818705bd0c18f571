#include "gpipe/loss/regression.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
LossSums RegressionLoss<T>::evaluate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale,
                                     Matrix<T> doutputs) {
  const std::int64_t n = std::int64_t(outputs.extent(0)), p = std::int64_t(outputs.extent(1));
  const ConstMatrix<T> y = targets.values;
  if (std::int64_t(y.extent(0)) < n || std::int64_t(y.extent(1)) != p)
    throw PipelineError(fmt::format("regression loss: targets are {}x{}, expected {}x{} (float "
                                    "targets, one column per model output)",
                                    y.extent(0), y.extent(1), n, p));
  if (std::int64_t(row_loss_.extent(0)) < n)
    row_loss_ = decltype(row_loss_)("gpipe::RegressionLoss::row_loss", n);
  if (std::int64_t(moments_.extent(0)) != 4 * p)
    moments_ = decltype(moments_)("gpipe::RegressionLoss::moments", 4 * p);
  auto row_loss = row_loss_;
  auto moments = moments_;
  const bool with_gradient = doutputs.extent(0) > 0;
  const int kind = int(kind_);
  const T delta = T(delta_), inv_p = T(1) / T(p);
  Kokkos::parallel_for(
      "gpipe::RegressionLoss::evaluate", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        double sum = 0;
        for (std::int64_t j = 0; j < p; ++j) {
          const T e = outputs(i, j) - y(i, j);
          const T a = e < T(0) ? -e : e;
          T l, g;
          if (kind == 0) {
            l = e * e;
            g = T(2) * e;
          } else if (kind == 1) {
            l = a;
            g = e > T(0) ? T(1) : (e < T(0) ? T(-1) : T(0));
          } else if (a <= delta) {
            l = T(0.5) * e * e;
            g = e;
          } else {
            l = delta * (a - T(0.5) * delta);
            g = e > T(0) ? delta : -delta;
          }
          sum += double(l);
          if (with_gradient) doutputs(i, j) = scale * inv_p * g;
        }
        row_loss(i) = sum / double(p);
      });
  // Per-output sums in row order (deterministic), for RMSE, MAE and R^2.
  Kokkos::parallel_for(
      "gpipe::RegressionLoss::moments", Kokkos::RangePolicy<ExecSpace>(0, p),
      KOKKOS_LAMBDA(const std::int64_t j) {
        double se = 0, ae = 0, sy = 0, syy = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const double e = double(outputs(i, j)) - double(y(i, j)), t = double(y(i, j));
          se += e * e;
          ae += e < 0 ? -e : e;
          sy += t;
          syy += t * t;
        }
        moments(4 * j + 0) = se;
        moments(4 * j + 1) = ae;
        moments(4 * j + 2) = sy;
        moments(4 * j + 3) = syy;
      });
  LossSums sums;
  Kokkos::parallel_reduce(
      "gpipe::RegressionLoss::sum_loss", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, double& acc) { acc += row_loss(i); }, sums.loss);
  auto host = Kokkos::create_mirror_view(moments);
  Kokkos::deep_copy(host, moments);
  sums.moments.assign(host.data(), host.data() + host.extent(0));
  return sums;
}

template class RegressionLoss<float>;
template class RegressionLoss<double>;

}  // namespace gpipe

#include "gpipe/loss/regression.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
void RegressionLoss<T>::reserve(std::int64_t rows, std::int64_t outputs, std::int64_t) {
  (void)rows;  // no row buffer: each row's terms go straight into the exact sums
  if (std::int64_t(moments_.extent(0)) != (4 * outputs + 1) * kExactWords) {  // 4 per output, then the loss
    moments_ = decltype(moments_)("gpipe::RegressionLoss::moments", (4 * outputs + 1) * kExactWords);
    moments_host_ = Kokkos::create_mirror_view(moments_);
  }
}

template <class T>
void RegressionLoss<T>::accumulate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale,
                                   Matrix<T> doutputs) {
  const std::int64_t n = std::int64_t(outputs.extent(0)), p = std::int64_t(outputs.extent(1));
  const ConstMatrix<T> y = targets.values;
  if (std::int64_t(y.extent(0)) < n || std::int64_t(y.extent(1)) != p)
    throw PipelineError(fmt::format("regression loss: targets are {}x{}, expected {}x{} (float "
                                    "targets, one column per model output)",
                                    y.extent(0), y.extent(1), n, p));
  if (pending_ > 0 && p != outputs_)
    throw PipelineError(fmt::format("regression loss: {} outputs, but the sums not yet read (take_sums) "
                                    "have {}",
                                    p, outputs_));
  reserve(n, p);
  outputs_ = p;
  auto moments = moments_;
  const bool with_gradient = doutputs.extent(0) > 0;
  const int kind = int(kind_);
  const T delta = T(delta_), inv_p = T(1) / T(p);
  const ExecSpace space = this->execution_space();
  // The totals since the last read: cleared by the first micro-batch.
  if (pending_ == 0)
    Kokkos::parallel_for(
        "gpipe::RegressionLoss::clear_totals",
        Kokkos::RangePolicy<ExecSpace>(space, 0, std::int64_t(moments.extent(0))),
        KOKKOS_LAMBDA(const std::int64_t w) { moments(w) = 0; });
  // One thread per row: the gradient, the row's loss (the mean over its
  // outputs, in output order) and its 4 moment terms per output, every term
  // added exactly to its sum (loss/exact_sum.hpp: atomic integer adds, the
  // same totals in any order or split of the rows; no fence, no copy).
  Kokkos::parallel_for(
      "gpipe::RegressionLoss::evaluate", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
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
          const double ed = double(outputs(i, j)) - double(y(i, j)), t = double(y(i, j));
          exact_sum_atomic_add(moments, (4 * j + 0) * kExactWords, ed * ed);
          exact_sum_atomic_add(moments, (4 * j + 1) * kExactWords, ed < 0 ? -ed : ed);
          exact_sum_atomic_add(moments, (4 * j + 2) * kExactWords, t);
          exact_sum_atomic_add(moments, (4 * j + 3) * kExactWords, t * t);
        }
        exact_sum_atomic_add(moments, 4 * p * kExactWords, sum / double(p));
      });
  ++pending_;
}

template <class T>
LossSums RegressionLoss<T>::take_sums() {
  LossSums sums;
  if (pending_ == 0) return sums;
  pending_ = 0;
  const ExecSpace space = this->execution_space();
  auto host = moments_host_;
  Kokkos::deep_copy(space, host, moments_);
  compat::fence(space, "gpipe::RegressionLoss::take_sums");
  const std::int64_t p = outputs_;
  sums.loss_exact = ExactSum(host.data() + 4 * p * kExactWords);
  for (std::int64_t k = 0; k < 4 * p; ++k) sums.moments_exact.emplace_back(host.data() + k * kExactWords);
  sums.round();
  return sums;
}

#define GPIPE_INSTANTIATE(T) template class RegressionLoss<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

#include "gpipe/loss/regression.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
void RegressionLoss<T>::reserve(std::int64_t rows, std::int64_t outputs) {
  if (std::int64_t(row_loss_.extent(0)) < rows)
    row_loss_ = decltype(row_loss_)("gpipe::RegressionLoss::row_loss", rows);
  if (std::int64_t(moments_.extent(0)) != 4 * outputs + 1) {  // 4 per output, then the loss sum
    moments_ = decltype(moments_)("gpipe::RegressionLoss::moments", 4 * outputs + 1);
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
  const bool first = pending_ == 0;
  auto row_loss = row_loss_;
  auto moments = moments_;
  const bool with_gradient = doutputs.extent(0) > 0;
  const int kind = int(kind_);
  const T delta = T(delta_), inv_p = T(1) / T(p);
  const ExecSpace space = this->execution_space();
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
        }
        row_loss(i) = sum / double(p);
      });
  // Per-output sums in row order (deterministic), for RMSE, MAE and R^2,
  // added to the running totals (the first micro-batch since the last read
  // starts them at 0: 0 + s_1 + s_2 + ..., the host's additions before).
  Kokkos::parallel_for(
      "gpipe::RegressionLoss::moments", Kokkos::RangePolicy<ExecSpace>(space, 0, p),
      KOKKOS_LAMBDA(const std::int64_t j) {
        double se = 0, ae = 0, sy = 0, syy = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const double e = double(outputs(i, j)) - double(y(i, j)), t = double(y(i, j));
          se += e * e;
          ae += e < 0 ? -e : e;
          sy += t;
          syy += t * t;
        }
        moments(4 * j + 0) = (first ? 0.0 : moments(4 * j + 0)) + se;
        moments(4 * j + 1) = (first ? 0.0 : moments(4 * j + 1)) + ae;
        moments(4 * j + 2) = (first ? 0.0 : moments(4 * j + 2)) + sy;
        moments(4 * j + 3) = (first ? 0.0 : moments(4 * j + 3)) + syy;
      });
  // The loss sum in fixed order (core/fixed_sum.hpp), added into the slot
  // after the moments: take_sums() reads everything with one copy.
  RowPolicy one(space, 1, Kokkos::AUTO);
  one.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<double>()));
  Kokkos::parallel_for(
      "gpipe::RegressionLoss::sum_loss", one, KOKKOS_LAMBDA(const RowMember& team) {
        const SumLanes<double> lanes(team.team_scratch(0), kSumLanes);
        const double loss = team_sum<double>(team, lanes, n, [&](const std::int64_t i) { return row_loss(i); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { moments(4 * p) = (first ? 0.0 : moments(4 * p)) + loss; });
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
  sums.loss = host(4 * p);
  sums.moments.assign(host.data(), host.data() + 4 * p);
  return sums;
}

#define GPIPE_INSTANTIATE(T) template class RegressionLoss<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

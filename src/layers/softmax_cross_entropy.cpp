#include "gpipe/layers/softmax_cross_entropy.hpp"
#include "gpipe/core/precision.hpp"

#include "gpipe/core/error.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
void SoftmaxCrossEntropy<T>::reserve(std::int64_t rows, std::int64_t) {
  if (std::int64_t(row_loss_.extent(0)) < rows) {
    row_loss_ = decltype(row_loss_)("gpipe::SoftmaxCrossEntropy::row_loss", rows);
    row_hit_ = decltype(row_hit_)("gpipe::SoftmaxCrossEntropy::row_hit", rows);
  }
}

template <class T>
void SoftmaxCrossEntropy<T>::accumulate(ConstMatrix<T> logits, ConstLabelVector labels, T scale,
                                        Matrix<T> dlogits, double loss_divisor) {
  const std::int64_t n = std::int64_t(logits.extent(0)), c = std::int64_t(logits.extent(1));
  reserve(n, c);
  classes_ = c;
  auto row_loss = row_loss_;
  auto row_hit = row_hit_;
  const bool with_gradient = dlogits.extent(0) > 0;
  const ExecSpace space = this->execution_space();
  // One team per row, the classes spread over the team's threads; the
  // arg-max and the sum of exponentials in the fixed lane order of
  // core/fixed_sum.hpp (the same at any thread count and on a GPU).
  RowPolicy rows(space, n, Kokkos::AUTO);
  rows.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<T>() + sum_lanes_bytes<std::int64_t>()));
  Kokkos::parallel_for(
      "gpipe::SoftmaxCrossEntropy::evaluate", rows, KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t i = team.league_rank();
        const std::int32_t label = labels(i);
        if (label < 0 || label >= c) {
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            row_hit(i) = -1;
            row_loss(i) = 0;
          });
          return;
        }
        const SumLanes<T> lanes(team.team_scratch(0), kSumLanes);
        const SumLanes<std::int64_t> lane_arg(team.team_scratch(0), kSumLanes);
        // Arg-max: the first index of the largest logit (each lane keeps its
        // first maximum; lanes then compared by value, then by index).
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSumLanes), [&](const int l) {
          std::int64_t arg = -1;
          T top = T(0);
          for (std::int64_t j = l; j < c; j += kSumLanes)
            if (arg < 0 || logits(i, j) > top) {
              top = logits(i, j);
              arg = j;
            }
          lanes(l) = top;
          lane_arg(l) = arg;
        });
        team.team_barrier();
        T zmax = lanes(0);
        std::int64_t argmax = lane_arg(0);
        for (int l = 1; l < kSumLanes; ++l)
          if (lane_arg(l) >= 0 && (lanes(l) > zmax || (lanes(l) == zmax && lane_arg(l) < argmax))) {
            zmax = lanes(l);
            argmax = lane_arg(l);
          }
        team.team_barrier();
        // Everything relative to the row maximum (DESIGN.md "Numerics"):
        // loss = log(sum_j exp(z_j - max)) - (z_label - max), softmax_j =
        // exp(z_j - max) / sum. Each z_j - max <= 0, so exp never overflows and
        // the largest term is exactly 1 (sum in [1, classes]); never form
        // max + log(sum), which rounds away log(sum) once |max| >> 1. The loss
        // term is formed in double, where z_label - max of two finite floats
        // cannot overflow.
        const T sum = team_sum<T>(team, lanes, c, [&](const std::int64_t j) { return compat::exp(logits(i, j) - zmax); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          row_loss(i) = double(compat::log(sum)) - (double(logits(i, label)) - double(zmax));
          row_hit(i) = argmax == label ? 1 : 0;
        });
        if (with_gradient) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const std::int64_t j) {
            const T p = compat::exp(logits(i, j) - zmax) / sum;
            dlogits(i, j) = scale * (p - (j == label ? T(1) : T(0)));
          });
        }
      });
  // The micro-batch's loss (fixed order), hit and bad-label sums in one
  // kernel, added to the running totals on the device (no fence, no copy:
  // take_sums() reads them once per step). The first micro-batch since the
  // last read starts the totals at 0, so each total is 0 + s_1 + s_2 + ...
  // in call order: the additions the host made when it read each one.
  auto totals = totals_;
  const bool first = pending_ == 0;
  RowPolicy one(space, 1, Kokkos::AUTO);
  one.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<double>()));
  Kokkos::parallel_for(
      "gpipe::SoftmaxCrossEntropy::totals", one, KOKKOS_LAMBDA(const RowMember& team) {
        const SumLanes<double> lanes(team.team_scratch(0), kSumLanes);
        const double loss = team_sum<double>(team, lanes, n, [&](const std::int64_t i) { return row_loss(i); });
        const double hits = team_sum<double>(team, lanes, n, [&](const std::int64_t i) { return row_hit(i) > 0 ? 1.0 : 0.0; });
        const double bad = team_sum<double>(team, lanes, n, [&](const std::int64_t i) { return row_hit(i) < 0 ? 1.0 : 0.0; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          totals(0) = (first ? 0.0 : totals(0)) + loss / loss_divisor;
          totals(1) = (first ? 0.0 : totals(1)) + hits;
          totals(2) = (first ? 0.0 : totals(2)) + bad;
        });
      });
  ++pending_;
}

template <class T>
LossSums SoftmaxCrossEntropy<T>::take_sums() {
  LossSums sums;
  if (pending_ == 0) return sums;
  pending_ = 0;
  const ExecSpace space = this->execution_space();
  Kokkos::deep_copy(space, totals_host_, totals_);
  compat::fence(space, "gpipe::SoftmaxCrossEntropy::take_sums");
  sums.loss = totals_host_(0);
  sums.correct = std::int64_t(totals_host_(1));
  const std::int64_t bad = std::int64_t(totals_host_(2));
  if (bad > 0)
    throw PipelineError("softmax cross-entropy: " + std::to_string(bad) +
                        " label(s) outside [0, " + std::to_string(classes_) + ")");
  return sums;
}

template <class T>
void SoftmaxCrossEntropy<T>::accumulate(ConstMatrix<T> logits, const Targets<T>& targets, T scale,
                                        Matrix<T> dlogits) {
  if (std::int64_t(targets.labels.extent(0)) < std::int64_t(logits.extent(0)))
    throw PipelineError("softmax cross-entropy: " + std::to_string(targets.labels.extent(0)) +
                        " labels for " + std::to_string(logits.extent(0)) +
                        " rows (classification needs integer labels)");
  accumulate(logits, targets.labels, scale, dlogits);
}

#define GPIPE_INSTANTIATE(T) template class SoftmaxCrossEntropy<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

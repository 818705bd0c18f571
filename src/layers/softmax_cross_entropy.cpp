#include "gpipe/layers/softmax_cross_entropy.hpp"
#include "gpipe/core/precision.hpp"

#include "gpipe/core/error.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
void SoftmaxCrossEntropy<T>::reserve(std::int64_t rows, std::int64_t, std::int64_t labels_per_row) {
  rows *= labels_per_row;
  if (totals_.extent(0) == 0) {
    totals_ = decltype(totals_)("gpipe::SoftmaxCrossEntropy::totals", kExactWords + 2);
    totals_host_ = Kokkos::create_mirror_view(totals_);
  }
  if (std::int64_t(row_loss_.extent(0)) < rows) {
    row_loss_ = decltype(row_loss_)("gpipe::SoftmaxCrossEntropy::row_loss", rows);
    row_hit_ = decltype(row_hit_)("gpipe::SoftmaxCrossEntropy::row_hit", rows);
  }
}

template <class T>
void SoftmaxCrossEntropy<T>::accumulate(ConstMatrix<T> logits, ConstLabelVector labels, T scale,
                                        Matrix<T> dlogits, std::int64_t rows_per_sample) {
  const std::int64_t n = std::int64_t(logits.extent(0)), c = std::int64_t(logits.extent(1));
  if (rows_per_sample < 1 || n % rows_per_sample != 0)
    throw PipelineError("softmax cross-entropy: " + std::to_string(n) + " rows are not samples of " +
                        std::to_string(rows_per_sample) + " rows");
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
  // Each sample's loss (its rows' losses in row order, over their count),
  // hits and bad labels added to the running totals on the device: exactly
  // (integer atomic adds, loss/exact_sum.hpp), so in any order, and without
  // a fence or a copy (take_sums() reads them once per run). The first
  // micro-batch since the last read clears them first.
  auto totals = totals_;
  if (pending_ == 0)
    Kokkos::parallel_for(
        "gpipe::SoftmaxCrossEntropy::clear_totals", Kokkos::RangePolicy<ExecSpace>(space, 0, kExactWords + 2),
        KOKKOS_LAMBDA(const std::int64_t w) { totals(w) = 0; });
  const std::int64_t R = rows_per_sample;
  Kokkos::parallel_for(
      "gpipe::SoftmaxCrossEntropy::totals", Kokkos::RangePolicy<ExecSpace>(space, 0, n / R),
      KOKKOS_LAMBDA(const std::int64_t sample) {
        double loss = 0;
        std::int64_t hits = 0, bad = 0;
        for (std::int64_t r = sample * R; r < (sample + 1) * R; ++r) {
          loss += row_loss(r);
          hits += row_hit(r) > 0 ? 1 : 0;
          bad += row_hit(r) < 0 ? 1 : 0;
        }
        exact_sum_atomic_add(totals, 0, R == 1 ? loss : loss / double(R));
        if (hits != 0) Kokkos::atomic_add(&totals(kExactWords), hits);
        if (bad != 0) Kokkos::atomic_add(&totals(kExactWords + 1), bad);
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
  sums.loss_exact = ExactSum(totals_host_.data());
  sums.round();
  sums.correct = totals_host_(kExactWords);
  const std::int64_t bad = totals_host_(kExactWords + 1);
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

#pragma once
// Element-wise regression losses on float targets: mse, mae, huber.

#include "gpipe/loss/loss.hpp"

namespace gpipe {

/// loss_i = (1/p) sum_j l(e_ij), e = output - target, p outputs, with
///   mse:   l(e) = e^2                      l'(e) = 2 e
///   mae:   l(e) = |e|                      l'(e) = sign(e) (0 at e = 0)
///   huber: l(e) = e^2 / 2 if |e| <= delta, delta (|e| - delta / 2) beyond;
///          l'(e) = clamp(e, -delta, delta)   (Huber 1964)
/// so the mean over samples is the mean over all elements (as PyTorch's
/// MSELoss, L1Loss and HuberLoss with reduction "mean"). Fills
/// LossSums::moments for the metrics.
template <class T>
class RegressionLoss final : public Loss<T> {
 public:
  enum class Kind { Mse, Mae, Huber };
  explicit RegressionLoss(Kind kind, double delta = 1.0) : kind_(kind), delta_(delta) {}

  /// targets.values: (n, outputs); throws PipelineError without them or
  /// with another number of outputs.
  void accumulate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale, Matrix<T> doutputs) override;
  LossSums take_sums() override;
  /// The exact sums' device and host buffers for `outputs` outputs (any
  /// number of rows; Loss::reserve).
  void reserve(std::int64_t rows, std::int64_t outputs, std::int64_t labels_per_row = 1) override;

 private:
  Kind kind_;
  double delta_;
  // Running totals, exact sums of kExactWords words each: 4 per output,
  // then the loss (reserve(), else on first use).
  Kokkos::View<std::int64_t*, MemSpace> moments_;
  typename Kokkos::View<std::int64_t*, MemSpace>::host_mirror_type moments_host_;
  std::int64_t pending_ = 0;  // accumulate() calls since the last take_sums()
  std::int64_t outputs_ = 0;  // p of the pending totals
};

}  // namespace gpipe

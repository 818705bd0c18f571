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
  /// Row, moment and host buffers for up to `rows` rows (Loss::reserve).
  void reserve(std::int64_t rows, std::int64_t outputs) override;

 private:
  Kind kind_;
  double delta_;
  Kokkos::View<double*, MemSpace> row_loss_;  // reserve(), else grown on demand
  Kokkos::View<double*, MemSpace> moments_;   // running totals: 4 per output, then the loss sum
  typename Kokkos::View<double*, MemSpace>::host_mirror_type moments_host_;
  std::int64_t pending_ = 0;  // accumulate() calls since the last take_sums()
  std::int64_t outputs_ = 0;  // p of the pending totals
};

}  // namespace gpipe

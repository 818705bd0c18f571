#pragma once
// Softmax cross-entropy loss over class logits.

#include <cstdint>

#include "gpipe/core/views.hpp"
#include "gpipe/loss/loss.hpp"

namespace gpipe {

/// Numerically stable softmax cross-entropy: loss_i = logsumexp(z_i) - z_i[label_i].
template <class T>
class SoftmaxCrossEntropy final : public Loss<T> {
 public:
  /// Loss::evaluate on targets.labels (see below); LossSums::loss sums
  /// -log softmax(z)_label, LossSums::correct counts arg-max hits.
  LossSums evaluate(ConstMatrix<T> logits, const Targets<T>& targets, T scale,
                    Matrix<T> dlogits) override;

  /// logits z: (n, classes); labels: (n), each in [0, classes).
  /// If dlogits has extent n (not 0), writes dL/dz = scale * (softmax(z) - onehot(label))
  /// into it; pass scale = 1/N, N the *mini-batch* size, so the loss is the
  /// mean over the mini-batch whatever its split into micro-batches (GPipe sec. 2.2).
  /// Labels outside [0, classes) throw PipelineError.
  LossSums evaluate(ConstMatrix<T> logits, ConstLabelVector labels, T scale, Matrix<T> dlogits);

  /// 6 flops per logit (max, exp, sum, softmax, gradient).
  static double flops(std::int64_t batch, std::int64_t classes) {
    return 6.0 * double(batch) * double(classes);
  }

 private:
  Kokkos::View<double*, MemSpace> row_loss_;      // grown on demand
  Kokkos::View<std::int32_t*, MemSpace> row_hit_; // 1 correct, 0 wrong, -1 bad label
};

}  // namespace gpipe

#pragma once
// Softmax cross-entropy loss over class logits.

#include <cstdint>

#include "gpipe/core/views.hpp"
#include "gpipe/loss/loss.hpp"

namespace gpipe {

/// Softmax cross-entropy: loss_i = log(sum_j exp(z_ij - m_i)) - (z_i[label_i] - m_i),
/// m_i = max_j z_ij, and softmax_ij = exp(z_ij - m_i) / sum_j exp(z_ij - m_i).
/// Exact in the sense of this formula (each operation rounded once, nothing
/// overflows) for every finite input in float or double, at any magnitude:
/// two equal logits of 1e30 give ln 2 and gradients (0.5, -0.5). The loss
/// term is accumulated in double, so float logits 3e38 apart give a finite
/// loss of 6e38. Non-finite logits give a non-finite loss (never a finite
/// one), which the trainer's non-finite check reports.
template <class T>
class SoftmaxCrossEntropy final : public Loss<T> {
 public:
  using Loss<T>::evaluate;
  /// Loss::accumulate on targets.labels (see below); the sums' loss adds
  /// -log softmax(z)_label, correct counts arg-max hits.
  void accumulate(ConstMatrix<T> logits, const Targets<T>& targets, T scale, Matrix<T> dlogits) override;

  /// logits z: (n, classes); labels: (n), each in [0, classes).
  /// If dlogits has extent n (not 0), writes dL/dz = scale * (softmax(z) - onehot(label))
  /// into it; pass scale = 1/N, N the *mini-batch* size, so the loss is the
  /// mean over the mini-batch whatever its split into micro-batches (GPipe sec. 2.2).
  /// Each sample's loss, the mean over its `rows_per_sample` consecutive rows
  /// (the tokens per sample for token_cross_entropy, their row losses added
  /// in row order; 1 otherwise: the row's loss), is added exactly to the
  /// device totals (LossSums, loss/exact_sum.hpp), and so are the hits and
  /// the labels outside [0, classes) (no fence); take_sums() reads them and
  /// throws PipelineError for a bad label. n must be a multiple of
  /// rows_per_sample.
  void accumulate(ConstMatrix<T> logits, ConstLabelVector labels, T scale, Matrix<T> dlogits,
                  std::int64_t rows_per_sample = 1);
  /// accumulate(logits, labels, scale, dlogits) then take_sums().
  LossSums evaluate(ConstMatrix<T> logits, ConstLabelVector labels, T scale, Matrix<T> dlogits) {
    accumulate(logits, labels, scale, dlogits);
    return take_sums();
  }
  LossSums take_sums() override;

  /// Row buffers for up to rows x labels_per_row rows, and the totals
  /// (Loss::reserve).
  void reserve(std::int64_t rows, std::int64_t classes, std::int64_t labels_per_row = 1) override;

  /// 6 flops per logit (max, exp, sum, softmax, gradient).
  static double flops(std::int64_t batch, std::int64_t classes) {
    return 6.0 * double(batch) * double(classes);
  }

 private:
  Kokkos::View<double*, MemSpace> row_loss_;      // reserve(), else grown on demand
  Kokkos::View<std::int32_t*, MemSpace> row_hit_; // 1 correct, 0 wrong, -1 bad label
  // Running totals since the last take_sums(): the loss's exact-sum words
  // (kExactWords), then hits and bad labels.
  Kokkos::View<std::int64_t*, MemSpace> totals_;  // reserve(), else on first use
  typename Kokkos::View<std::int64_t*, MemSpace>::host_mirror_type totals_host_;
  std::int64_t pending_ = 0;  // accumulate() calls since the last take_sums()
  std::int64_t classes_ = 0;  // of the last accumulate(), for the bad-label message
};

}  // namespace gpipe

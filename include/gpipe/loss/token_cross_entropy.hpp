#pragma once
// The language-model loss: softmax cross-entropy over every token of every
// sequence (GPT, Radford et al. 2018, eq. 1: the next-token log-likelihood).

#include <cstdint>

#include "gpipe/core/views.hpp"
#include "gpipe/layers/softmax_cross_entropy.hpp"
#include "gpipe/loss/loss.hpp"

namespace gpipe {

/// model.loss: token_cross_entropy. Outputs (n, T*V) row-major: V logits
/// for each of the T tokens of a sample (lm_head's [T, V]); targets.labels
/// (n*T) row-major with targets.per_row = T: the id of the token that
/// follows each input token (data.format: tokens: inputs shifted by one).
///
/// The per-sample loss is the mean over its T tokens,
///   loss_i = (1/T) sum_t [log sum_v exp(z_itv - m_it) - (z_it[y_it] - m_it)],
/// computed token by token with SoftmaxCrossEntropy (the same stable
/// formula, fixed-order sums). With scale = 1/N (N the global mini-batch
/// size, as every loss gets) the gradient is scale/T (softmax - onehot) per
/// token: the mean over the N*T tokens of the mini-batch, whatever its split
/// into micro-batches and replicas. LossSums::loss sums loss_i over the
/// rows exactly (so a mean over samples is the loss per token; each loss_i
/// adds its T token losses in token order, then divides by T); LossSums::correct
/// counts tokens whose arg-max logit is the target (out of n*T).
/// Throws PipelineError for a label outside [0, V), for fewer labels than
/// n*T, or outputs that do not divide into T tokens.
template <class T>
class TokenCrossEntropy final : public Loss<T> {
 public:
  void accumulate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale, Matrix<T> doutputs) override;
  LossSums take_sums() override;
  /// The token buffers for up to `rows` samples of `outputs` = T x V
  /// logits, T = labels_per_row tokens each (rows x T token rows; Loss::reserve).
  /// Throws PipelineError when outputs do not divide into T tokens.
  void reserve(std::int64_t rows, std::int64_t outputs, std::int64_t labels_per_row = 1) override;

 private:
  SoftmaxCrossEntropy<T> tokens_;
};

/// The figures of a mean loss per token l (nats): perplexity exp(l) and
/// bits per token l / ln 2 (bits per character for a character-level
/// vocabulary; per byte for bytes).
struct TokenMetrics {
  double loss = 0;        ///< mean cross-entropy per token, nats
  double perplexity = 0;  ///< exp(loss)
  double bits = 0;        ///< loss / ln 2: bits per token
};
TokenMetrics token_metrics(double loss_per_token);

}  // namespace gpipe

#include "gpipe/loss/token_cross_entropy.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include <cmath>

#include "gpipe/core/error.hpp"

namespace gpipe {

template <class T>
void TokenCrossEntropy<T>::accumulate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale,
                                      Matrix<T> doutputs) {
  const std::int64_t n = std::int64_t(outputs.extent(0)), tokens = targets.per_row;
  const std::int64_t width = std::int64_t(outputs.extent(1));
  if (tokens < 1 || width % tokens != 0)
    throw PipelineError(fmt::format("token cross-entropy: {} outputs per sample do not divide into {} "
                                    "tokens",
                                    width, tokens));
  if (std::int64_t(targets.labels.extent(0)) < n * tokens)
    throw PipelineError(fmt::format("token cross-entropy: {} labels for {} samples of {} tokens "
                                    "(the loss needs one integer label per token)",
                                    targets.labels.extent(0), n, tokens));
  if (n > 1 && !outputs.span_is_contiguous())
    throw PipelineError("token cross-entropy: the outputs are not contiguous");
  const std::int64_t V = width / tokens;
  // Every token a row of V logits: (n, T*V) row-major is (n*T, V) row-major.
  tokens_.set_execution_space(this->execution_space());
  const ConstMatrix<T> z(outputs.data(), size_t(n * tokens), size_t(V));
  const Matrix<T> dz = doutputs.extent(0) > 0 ? Matrix<T>(doutputs.data(), size_t(n * tokens), size_t(V))
                                              : Matrix<T>();
  const ConstLabelVector labels = Kokkos::subview(targets.labels, std::make_pair(std::int64_t(0), n * tokens));
  // Per sample: the mean over its T tokens, added exactly to the totals.
  tokens_.accumulate(z, labels, T(double(scale) / double(tokens)), dz, tokens);
}

template <class T>
void TokenCrossEntropy<T>::reserve(std::int64_t rows, std::int64_t outputs, std::int64_t labels_per_row) {
  if (labels_per_row < 1 || outputs % labels_per_row != 0)
    throw PipelineError(fmt::format("token cross-entropy: {} outputs per sample do not divide into {} "
                                    "tokens",
                                    outputs, labels_per_row));
  tokens_.set_execution_space(this->execution_space());
  tokens_.reserve(rows * labels_per_row, outputs / labels_per_row);
}

template <class T>
LossSums TokenCrossEntropy<T>::take_sums() {
  return tokens_.take_sums();
}

TokenMetrics token_metrics(double loss_per_token) {
  TokenMetrics m;
  m.loss = loss_per_token;
  m.perplexity = std::exp(loss_per_token);
  m.bits = loss_per_token / std::log(2.0);
  return m;
}

#define GPIPE_INSTANTIATE(T) template class TokenCrossEntropy<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

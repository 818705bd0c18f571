#include "gpipe/layers/softmax_cross_entropy.hpp"

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
LossSums SoftmaxCrossEntropy<T>::evaluate(ConstMatrix<T> logits, ConstLabelVector labels, T scale,
                                          Matrix<T> dlogits) {
  const std::int64_t n = std::int64_t(logits.extent(0)), c = std::int64_t(logits.extent(1));
  if (std::int64_t(row_loss_.extent(0)) < n) {
    row_loss_ = decltype(row_loss_)("gpipe::SoftmaxCrossEntropy::row_loss", n);
    row_hit_ = decltype(row_hit_)("gpipe::SoftmaxCrossEntropy::row_hit", n);
  }
  auto row_loss = row_loss_;
  auto row_hit = row_hit_;
  const bool with_gradient = dlogits.extent(0) > 0;
  Kokkos::parallel_for(
      "gpipe::SoftmaxCrossEntropy::evaluate", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int32_t label = labels(i);
        if (label < 0 || label >= c) {
          row_hit(i) = -1;
          row_loss(i) = 0;
          return;
        }
        T zmax = logits(i, 0);
        std::int64_t argmax = 0;
        for (std::int64_t j = 1; j < c; ++j)
          if (logits(i, j) > zmax) {
            zmax = logits(i, j);
            argmax = j;
          }
        // Everything relative to the row maximum (DESIGN.md "Numerics"):
        // loss = log(sum_j exp(z_j - max)) - (z_label - max), softmax_j =
        // exp(z_j - max) / sum. Each z_j - max <= 0, so exp never overflows and
        // the largest term is exactly 1 (sum in [1, classes]); never form
        // max + log(sum), which rounds away log(sum) once |max| >> 1. The loss
        // term is formed in double, where z_label - max of two finite floats
        // cannot overflow.
        T sum = T(0);
        for (std::int64_t j = 0; j < c; ++j) sum += compat::exp(logits(i, j) - zmax);
        row_loss(i) = double(compat::log(sum)) - (double(logits(i, label)) - double(zmax));
        row_hit(i) = argmax == label ? 1 : 0;
        if (with_gradient) {
          for (std::int64_t j = 0; j < c; ++j) {
            const T p = compat::exp(logits(i, j) - zmax) / sum;
            dlogits(i, j) = scale * (p - (j == label ? T(1) : T(0)));
          }
        }
      });
  LossSums sums;
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "gpipe::SoftmaxCrossEntropy::sum_loss", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, double& acc) { acc += row_loss(i); }, sums.loss);
  Kokkos::parallel_reduce(
      "gpipe::SoftmaxCrossEntropy::sum_correct", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) { acc += row_hit(i) > 0 ? 1 : 0; },
      sums.correct);
  Kokkos::parallel_reduce(
      "gpipe::SoftmaxCrossEntropy::count_bad_labels", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) { acc += row_hit(i) < 0 ? 1 : 0; },
      bad);
  if (bad > 0)
    throw PipelineError("softmax cross-entropy: " + std::to_string(bad) +
                        " label(s) outside [0, " + std::to_string(c) + ")");
  return sums;
}

template <class T>
LossSums SoftmaxCrossEntropy<T>::evaluate(ConstMatrix<T> logits, const Targets<T>& targets, T scale,
                                          Matrix<T> dlogits) {
  if (std::int64_t(targets.labels.extent(0)) < std::int64_t(logits.extent(0)))
    throw PipelineError("softmax cross-entropy: " + std::to_string(targets.labels.extent(0)) +
                        " labels for " + std::to_string(logits.extent(0)) +
                        " rows (classification needs integer labels)");
  return evaluate(logits, targets.labels, scale, dlogits);
}

template class SoftmaxCrossEntropy<float>;
template class SoftmaxCrossEntropy<double>;

}  // namespace gpipe

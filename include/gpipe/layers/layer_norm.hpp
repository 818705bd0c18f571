#pragma once
// Layer normalization over features (Ba, Kiros, Hinton 2016, eq. 4):
// y = (x - mean) / sqrt(var + eps) * gamma + beta, per row.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Deck keys of `{type: layer_norm, eps: 1e-5}`.
struct LayerNormConfig : LayerConfig {
  double eps = 1e-5;  ///< variance epsilon (> 0)
};

/// Input shape (features), or (tokens, width) for a sequence (each token's
/// width features normalized on their own, as GPT-2's final LayerNorm and
/// transformer_block's: input (n, T*d) row-major treated as (n*T, d));
/// output the same. Parameters "gamma" (1, f), initialized to 1, and "beta"
/// (1, f), initialized to 0, with f = features or width. var is the biased
/// (1/f) variance. Saved state: per sample and token (mean,
/// sqrt(var + eps)), written by forward and read by backward. The statistics
/// are scale-safe (each row divided by its largest |x| before any square, in
/// double), and xhat = (x - mean) / sqrt(var + eps) is formed in double, so
/// the result is that of the formula for any finite input at any magnitude
/// (tested at 1e-30 to 1e30 in float and double; float needs no scaling
/// in double, double divides each row by its largest |x|). FLOPs: 8 per element
/// forward, 4 (parameter gradients) + 8 (input gradient) backward.
template <class T>
class LayerNorm final : public Layer<T> {
 public:
  explicit LayerNorm(const LayerShape& shape);

  void bind(T* values, T* gradients) override;
  void initialize(std::uint64_t seed) override;
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override;
  using Layer<T>::forward;
  using Layer<T>::backward;
  /// How a row kernel is laid out: `threads`, one thread per row (the
  /// default on host execution spaces), or `teams`, one team per row, its
  /// threads over the features (the default on GPUs). Both give the same
  /// bits (the sums of gpipe/core/fixed_sum.hpp); tests run both.
  enum class RowKernel { threads, teams };
  /// forward() / backward() with the given row kernel (arguments and
  /// shapes as there).
  void forward_rows(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved, RowKernel kernel);
  void backward_rows(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx, SavedView<T> saved,
                     RowKernel kernel);
  double eps() const { return eps_; }
  /// Features normalized together: in_features(), or the width of a (tokens, width) input.
  std::int64_t width() const;

 private:
  using Unmanaged = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  double eps_;
  Unmanaged gamma_, beta_, gamma_grad_, beta_grad_;
};

}  // namespace gpipe

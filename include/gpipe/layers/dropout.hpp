#pragma once
// Inverted dropout (Srivastava et al. 2014): in training, y = x * keep / (1 - rate)
// with keep ~ Bernoulli(1 - rate); in evaluation, y = x.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Deck keys of `{type: dropout, rate: 0.1}`.
struct DropoutConfig : LayerConfig {
  double rate = 0;  ///< drop probability in [0, 1)
};

/// Any input shape; the output has the same shape. FLOPs: one per element in
/// forward and one in backward.
/// The mask of element (i, j) of a micro-batch is a pure function of
/// (seed, step, layer index, sample = ctx.sample_offset + i, column j), so a
/// recomputed forward pass (re-materialization) reproduces it exactly, and it
/// does not depend on how the mini-batch is split into micro-batches.
template <class T>
class Dropout final : public Layer<T> {
 public:
  explicit Dropout(const LayerShape& shape);

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override;
  using Layer<T>::forward;
  using Layer<T>::backward;
  double rate() const { return rate_; }
  /// Backward regenerates the mask from (seed, step, layer, sample, column).
  bool reads_input_in_backward() const override { return false; }

 private:
  double rate_;
};

}  // namespace gpipe

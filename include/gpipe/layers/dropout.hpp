#pragma once
// Inverted dropout (Srivastava et al. 2014): in training, y = x * keep / (1 - rate)
// with keep ~ Bernoulli(1 - rate); in evaluation, y = x.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// The mask of element (i, j) of a micro-batch is a pure function of
/// (seed, step, layer index, sample = ctx.sample_offset + i, column j), so a
/// recomputed forward pass (re-materialization) reproduces it exactly, and it
/// does not depend on how the mini-batch is split into micro-batches.
template <class T>
class Dropout final : public Layer<T> {
 public:
  /// rate in [0, 1).
  Dropout(std::int64_t index, std::int64_t features, double rate);

  std::string type() const override { return "dropout"; }
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx) override;
  double rate() const { return rate_; }

 protected:
  double count_flops(std::int64_t batch, bool input_gradient) const override;

 private:
  double rate_;
};

}  // namespace gpipe

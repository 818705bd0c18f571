#pragma once
// Element-wise activations: y = f(x), dx = dy * f'(x). Shapes (n, features)
// in and out; no parameters. backward recomputes f'(x) from the input x.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Element-wise layer over an activation functor `Op` with static
/// value(x) and derivative(x). The instantiations below are the public types.
template <class T, class Op>
class Elementwise final : public Layer<T> {
 public:
  Elementwise(std::int64_t index, std::int64_t features) : Layer<T>(index, features, features) {}
  std::string type() const override;
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx) override;

 protected:
  /// Op::kFlops per element in the forward pass, and again in the backward.
  double count_flops(std::int64_t batch, bool input_gradient) const override;
};

struct ReluOp;
struct TanhOp;
struct GeluOp;

/// max(0, x); derivative 1 for x > 0, else 0.
template <class T>
using ReLU = Elementwise<T, ReluOp>;
/// tanh(x); derivative 1 - tanh(x)^2.
template <class T>
using Tanh = Elementwise<T, TanhOp>;
/// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
using GELU = Elementwise<T, GeluOp>;

}  // namespace gpipe

#pragma once
// Element-wise activations: y = f(x), dx = dy * f'(x). Any input shape; the
// output has the same shape. No parameters; backward recomputes f'(x) from
// the input x. FLOPs: Op::kFlops per element in forward, again in backward.

#include <type_traits>

#include "gpipe/layers/layer.hpp"

namespace gpipe {

struct ReluOp;
struct TanhOp;
struct GeluOp;

/// Element-wise layer over an activation functor `Op` with static
/// value(x) and derivative(x). The instantiations below are the public types.
template <class T, class Op>
class Elementwise final : public Layer<T> {
 public:
  explicit Elementwise(const LayerShape& shape) : Layer<T>(shape) {}
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override;
  /// ReLU: y is x or 0, dx is dy or dy * 0 (NaN for a NaN x).
  bool preserves_values() const override { return std::is_same_v<Op, ReluOp>; }
  using Layer<T>::forward;
  using Layer<T>::backward;
};

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

#include "gpipe/layers/activations.hpp"
#include "gpipe/core/precision.hpp"

#include <type_traits>

#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/kernels/eltwise.hpp"

namespace gpipe {

struct ReluOp {
  static constexpr double kFlops = 2;
  template <class T>
  // NaN propagates (never mapped to 0), so a non-finite activation reaches
  // the loss and the gradients instead of training on silently.
  KOKKOS_INLINE_FUNCTION static T value(T x) { return x > T(0) || x != x ? x : T(0); }
  // Two selects of constants and x, no branch, so the backward loop
  // vectorizes (a compare and a blend per vector): 1 for x > 0, x (NaN) for
  // NaN, else 0.
  template <class T>
  KOKKOS_INLINE_FUNCTION static T derivative(T x) {
    const T step = x > T(0) ? T(1) : T(0);
    return x == x ? step : x;
  }
};

// tanh(u) = 1 - 2 / (exp(2u) + 1): one exp instead of a libm tanh (about 3x
// faster here); exact limits +-1 for large |u|.
template <class T>
KOKKOS_INLINE_FUNCTION T fast_tanh(T u) {
  return T(1) - T(2) / (compat::exp(T(2) * u) + T(1));
}

struct TanhOp {
  static constexpr double kFlops = 25;
  template <class T>
  KOKKOS_INLINE_FUNCTION static T value(T x) { return compat::tanh(x); }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T derivative(T x) {
    const T t = compat::tanh(x);
    return T(1) - t * t;
  }
};

struct GeluOp {
  static constexpr double kFlops = 60;
  static constexpr double kC = 0.7978845608028654;  // sqrt(2/pi)
  static constexpr double kA = 0.044715;
  template <class T>
  KOKKOS_INLINE_FUNCTION static T value(T x) {
    const T u = T(kC) * (x + T(kA) * x * x * x);
    return T(0.5) * x * (T(1) + fast_tanh(u));
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T derivative(T x) {
    const T u = T(kC) * (x + T(kA) * x * x * x);
    const T t = fast_tanh(u);
    const T du = T(kC) * (T(1) + T(3 * kA) * x * x);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
  }
};

template <class T, class Op>
void Elementwise<T, Op>::forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) {
  const auto xf = flat(x);
  const auto yf = flat(y);
  if constexpr (std::is_same_v<Op, GeluOp>)  // a vendor implementation when one is in force (kernels/eltwise.hpp)
    if (kernels::eltwise_forward<T>(ctx.space, kernels::Eltwise::gelu_tanh, xf.data(), yf.data(),
                                    std::int64_t(xf.extent(0))))
      return;
  Kokkos::parallel_for(
      "gpipe::Elementwise::forward", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, xf.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { yf(i) = Op::value(xf(i)); });
}

template <class T, class Op>
void Elementwise<T, Op>::backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                                  Matrix<T> dx, SavedView<T>) {
  if (dx.extent(0) == 0) return;
  const auto xf = flat(x);
  const auto dyf = flat(dy);
  const auto dxf = flat(dx);
  if constexpr (std::is_same_v<Op, GeluOp>)
    if (kernels::eltwise_backward<T>(ctx.space, kernels::Eltwise::gelu_tanh, xf.data(), dyf.data(), dxf.data(),
                                     std::int64_t(xf.extent(0))))
      return;
  Kokkos::parallel_for(
      "gpipe::Elementwise::backward", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, xf.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { dxf(i) = dyf(i) * Op::derivative(xf(i)); });
}

#define GPIPE_INSTANTIATE(T) template class Elementwise<T, ReluOp>; template class Elementwise<T, TanhOp>; template class Elementwise<T, GeluOp>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

namespace {
template <class Op, template <class> class L>
LayerEntry elementwise_entry(const char* name) {
  LayerEntry e;
  e.name = name;
  e.output_shape = [](const LayerConfig&, const Shape& in) { return in; };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    return (input_gradient ? 2.0 : 1.0) * Op::kFlops * double(batch) * double(in.size());
  };
  return with_factories<L>(e);
}
}  // namespace

GPIPE_LAYER_ENTRIES(activations) {
  return {elementwise_entry<ReluOp, ReLU>("relu"), elementwise_entry<GeluOp, GELU>("gelu"),
          elementwise_entry<TanhOp, Tanh>("tanh")};
}

}  // namespace gpipe

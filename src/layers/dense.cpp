#include "gpipe/layers/dense.hpp"
#include "gpipe/core/precision.hpp"

#include <cmath>
#include <fmt/format.h>

#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/rng.hpp"
#include "gpipe/kernels/gemm.hpp"

namespace gpipe {

template <class T>
Dense<T>::Dense(const LayerShape& shape)
    : Layer<T>(shape), init_(shape.spec.as<DenseConfig>().init) {}

template <class T>
void Dense<T>::bind(T* values, T* gradients) {
  const auto in = this->in_features(), out = this->out_features();
  weight_ = Unmanaged(values, in, out);
  bias_ = Unmanaged(values + in * out, 1, out);
  weight_grad_ = Unmanaged(gradients, in, out);
  bias_grad_ = Unmanaged(gradients + in * out, 1, out);
}

template <class T>
void Dense<T>::initialize(std::uint64_t seed) {
  const auto in = this->in_features(), out = this->out_features();
  const double fan = init_ == Init::He ? double(in) : double(in + out);
  const double a = std::sqrt(6.0 / fan);
  const std::uint64_t layer = std::uint64_t(this->index());
  auto w = weight_;
  auto b = bias_;
  // instance: default (Layer::initialize takes no instance: construction, before any step)
  Kokkos::parallel_for(
      "gpipe::Dense::initialize", Kokkos::RangePolicy<ExecSpace>(0, in * out),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const double u = rng::uniform01(rng::hash(seed, rng::kInit, layer, std::uint64_t(e)));
        w(e / out, e % out) = T((2.0 * u - 1.0) * a);
      });
  // instance: default (Layer::initialize takes no instance: construction)
  Kokkos::parallel_for(
      "gpipe::Dense::initialize_bias", Kokkos::RangePolicy<ExecSpace>(0, out),
      KOKKOS_LAMBDA(const std::int64_t j) { b(0, j) = T(0); });
}

template <class T>
void Dense<T>::forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) {
  kernels::gemm_bias_weights<T>(ctx.space, x, weight_, bias_, y);
}

template <class T>
void Dense<T>::backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                        SavedView<T> saved) {
  const kernels::OperandReuse reuse;  // both products read dy: converted to bf16 once (gemm.hpp)
  backward_weights(ctx, x, dy, saved);
  backward_input(ctx, x, dy, dx, saved);
}

template <class T>
void Dense<T>::backward_weights(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                                SavedView<T>) {
  const bool accumulate = ctx.accumulate_gradients;  // false: write (beta = 0), see PassContext
  kernels::gemm<T>(ctx.space, kernels::Op::transpose, kernels::Op::none, T(1), x, dy, accumulate ? T(1) : T(0),
                   weight_grad_);
  // Bias gradient: column sums of dy, one team per output column with the
  // rows spread over its threads in a fixed order (core/fixed_sum.hpp).
  add_column_sums<T>("gpipe::Dense::backward_bias", ctx.space, std::int64_t(dy.extent(0)),
                     this->out_features(), Kokkos::subview(bias_grad_, 0, Kokkos::ALL),
                     KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { return dy(i, j); },
                     accumulate);
}

template <class T>
void Dense<T>::backward_input(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy,
                              Matrix<T> dx, SavedView<T>) {
  if (dx.extent(0) > 0)
    kernels::gemm_weights<T>(ctx.space, kernels::Op::none, kernels::Op::transpose, T(1), dy, weight_, T(0), dx);
}

#define GPIPE_INSTANTIATE(T) template class Dense<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

namespace {
LayerEntry dense_entry() {
  LayerEntry e;
  e.name = "dense";
  e.splits_backward = true;  // Dense::backward_input / backward_weights
  e.whole_batch_weights = true;  // Dense::whole_batch_weights
  e.keys = {"units", "init"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<DenseConfig>();
    c->units = k.required_integer("units", 1, "a positive integer");
    const auto init = k.text("init", "he", "he or glorot");
    if (init == "glorot") c->init = Init::Glorot;
    else if (init != "he") k.fail("init", fmt::format("unknown initialization '{}' (expected he or glorot)", init));
    return c;
  };
  e.output_shape = [](const LayerConfig& c, const Shape& in) {
    if (in.rank() != 1) throw ShapeMismatch("(features); add {type: flatten} before it");
    return Shape{static_cast<const DenseConfig&>(c).units};
  };
  e.parameters = [](const LayerConfig& c, const Shape& in) {
    const auto out = static_cast<const DenseConfig&>(c).units;
    return std::vector<ParameterSpec>{{"weight", in.size(), out}, {"bias", 1, out}};
  };
  // backward(): the weight gradient converts x (rows, in) and dy (rows, out); the input gradient reuses dy.
  e.reused_operands = [](const LayerConfig& c, const Shape& in, std::int64_t rows) {
    return ReusedOperands{rows * in.size(), rows * static_cast<const DenseConfig&>(c).units};
  };
  e.flops = [](const LayerConfig&, const Shape& input, const Shape& output, std::int64_t batch,
               bool input_gradient) {
    const double n = double(batch), in = double(input.size()), out = double(output.size());
    return (input_gradient ? 6.0 : 4.0) * n * in * out + 2.0 * n * out;
  };
  return with_factories<Dense>(e);
}
}  // namespace

GPIPE_LAYER_ENTRIES(dense) { return {dense_entry()}; }

}  // namespace gpipe

// flatten: any per-sample shape [d0, d1, ...] to [d0 * d1 * ...]. Samples
// are rows of features in both, in the same order, so forward and backward
// copy (the cell gives every layer its own output buffer). No FLOPs.
//   {type: flatten}

#include "gpipe/layers/layer.hpp"

namespace gpipe {

namespace {

template <class T>
class Flatten final : public Layer<T> {
 public:
  explicit Flatten(const LayerShape& shape) : Layer<T>(shape) {}
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    Kokkos::deep_copy(ctx.space, y, x);
  }
  void backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    if (dx.extent(0) > 0) Kokkos::deep_copy(ctx.space, dx, dy);
  }
  bool preserves_values() const override { return true; }  // copies
  bool reads_input_in_backward() const override { return false; }
};

LayerEntry flatten_entry() {
  LayerEntry e;
  e.name = "flatten";
  e.output_shape = [](const LayerConfig&, const Shape& in) { return Shape{in.size()}; };
  e.flops = [](const LayerConfig&, const Shape&, const Shape&, std::int64_t, bool) { return 0.0; };
  return with_factories<Flatten>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(flatten) { return {flatten_entry()}; }

}  // namespace gpipe

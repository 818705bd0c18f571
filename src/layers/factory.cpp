#include "gpipe/layers/factory.hpp"
#include "gpipe/core/precision.hpp"

#include <type_traits>

namespace gpipe {

template <class T>
std::unique_ptr<Layer<T>> make_layer(const LayerShape& shape) {
  if constexpr (std::is_same_v<T, float>) return shape.entry->make_float(shape);
  else return shape.entry->make_double(shape);
}

template <class T>
std::unique_ptr<Layer<T>> make_layer(const ModelSpec& model, std::int64_t index) {
  return make_layer<T>(model_shapes(model).at(size_t(index)));
}

#define GPIPE_INSTANTIATE_FUNCTIONS(T) \
  template std::unique_ptr<Layer<T>> make_layer<T>(const LayerShape&); \
  template std::unique_ptr<Layer<T>> make_layer<T>(const ModelSpec&, std::int64_t);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE_FUNCTIONS)
#undef GPIPE_INSTANTIATE_FUNCTIONS

template <class T>
void Layer<T>::forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y) {
  Vector<T> saved("gpipe::Layer::saved", size_t(saved_size().elements(std::int64_t(x.extent(0)))));
  forward(ctx, x, y, SavedView<T>(saved.data(), saved.extent(0)));
}

template <class T>
void Layer<T>::backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx) {
  const auto n = std::int64_t(x.extent(0));
  Vector<T> saved("gpipe::Layer::saved", size_t(saved_size().elements(n)));
  if (saved.extent(0) > 0) {
    PassContext again = ctx;
    again.recompute = true;
    Matrix<T> y("gpipe::Layer::y", size_t(n), size_t(out_features()));
    forward(again, x, y, SavedView<T>(saved.data(), saved.extent(0)));
  }
  backward(ctx, x, dy, dx, SavedView<T>(saved.data(), saved.extent(0)));
}

#define GPIPE_INSTANTIATE(T) template class Layer<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

#pragma once
// Internal: the interface each convolution implementation behind the kernel
// seam fills in (gpipe/kernels/conv.hpp), and their factories. conv.cpp
// checks the arguments and forwards to the Impl made at construction.

#include <cstdint>
#include <memory>

#include "gpipe/kernels/conv.hpp"

namespace gpipe::kernels {

template <class T>
struct Conv2d<T>::Impl {
  using Saved = typename Conv2d<T>::Saved;
  using Bias = typename Conv2d<T>::Bias;
  using ConstBias = typename Conv2d<T>::ConstBias;
  virtual ~Impl() = default;
  virtual void reserve(std::int64_t n) = 0;
  virtual void forward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstBias b, Matrix<T> y,
                       Saved saved) = 0;
  virtual void backward_data(const ExecSpace& space, ConstMatrix<T> dy, ConstMatrix<T> w, Matrix<T> dx) = 0;
  virtual void backward_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, Saved saved,
                                Matrix<T> dw, Bias db, bool accumulate) = 0;
  virtual void backward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, ConstMatrix<T> w,
                        Saved saved, Matrix<T> dw, Bias db, bool accumulate, Matrix<T> dx) = 0;
};

/// Adds `count` to conv2d_primitives_created().
void count_conv2d_primitives(std::int64_t count);

namespace portable {
template <class T>
std::unique_ptr<typename Conv2d<T>::Impl> make_conv2d(const ConvShape& shape);
}  // namespace portable

// Only in builds with GPIPE_ENABLE_ONEDNN (src/kernels/conv_onednn.cpp).
namespace onednn {
std::unique_ptr<Conv2d<float>::Impl> make_conv2d(const ConvShape& shape);
}  // namespace onednn

}  // namespace gpipe::kernels

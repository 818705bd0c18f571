#pragma once
// Internal: the interface each convolution implementation behind the kernel
// seam fills in (gpipe/kernels/conv.hpp), and their factories. conv.cpp
// checks the arguments and forwards to the Impl made at construction.

#include <cstdint>
#include <memory>
#include <string>

#include "gpipe/kernels/conv.hpp"
#include "gpipe/kernels/vendor.hpp"

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
/// db(f) (+)= the sum over samples i and pixels p of dy(i, f*P + p), one
/// team per filter in a fixed order (the same bits at every thread count,
/// team size and backend; conv_portable.cpp). Written when !accumulate.
template <class T>
void conv2d_bias_gradient(const ExecSpace& space, ConstMatrix<T> dy, typename Conv2d<T>::Bias db, std::int64_t P,
                          bool accumulate);
}  // namespace portable

// Only in builds with GPIPE_ENABLE_ONEDNN (src/kernels/conv_onednn.cpp).
namespace onednn {
std::unique_ptr<Conv2d<float>::Impl> make_conv2d(const ConvShape& shape);
}  // namespace onednn

// Only in builds with GPIPE_ENABLE_CUDNN (src/kernels/conv_cudnn.cpp), at
// float and double.
namespace cudnn {
template <class T>
std::unique_ptr<typename Conv2d<T>::Impl> make_conv2d(const ConvShape& shape);
/// "cuDNN 9.19.0" (the library loaded at run time).
std::string version();
/// Convolutions (shape, n) whose forward could not use the preferred
/// algorithm (conv_cudnn.cpp); their outputs may differ in the last bits
/// from another micro-batch size's.
std::int64_t cudnn_fallbacks();
/// conv.hpp's cudnn_workspace_bytes (needs a CUDA device).
std::int64_t workspace_bytes(const ConvShape& shape, std::int64_t n, int scalar_bytes);
}  // namespace cudnn

}  // namespace gpipe::kernels

// cuDNN convolution of the kernel seam (gpipe/kernels/conv.hpp), CUDA builds
// with GPIPE_ENABLE_CUDNN; float and double.
//
// API: cuDNN 9's convolution functions (cudnn_cnn.h: cudnnConvolutionForward,
// cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter). cuDNN 9
// marks them legacy (a warning only with CUDNN_WARN_DEPRECATED) and runs
// them on its graph engines; they take gpipe's layouts as they are:
//   x  (n, C*H*W)    = NCHW tensor (n, C, H, W), packed
//   y  (n, F*OH*OW)  = NCHW tensor (n, F, OH, OW), packed
//   w  (F, C*KH*KW)  = NCHW filter (F, C, KH, KW)
// so no reordering and no saved state (conv2d_saved_per_sample: 0).
// Cross-correlation (CUDNN_CROSS_CORRELATION, as every framework), zero
// padding pad_h / pad_w on both sides, dilation 1; cuDNN's output extent is
// the same floor (H + 2 pad - KH) / stride + 1 (checked per descriptor).
//
//   forward          cudnnConvolutionForward (beta 0: y is not read), then
//                    y += b with cudnnAddTensor (element-wise).
//   backward-data    cudnnConvolutionBackwardData, beta 0.
//   backward-weights cudnnConvolutionBackwardFilter with beta = accumulate:
//                    dW = sum (beta 0) or dW + sum (beta 1), the sum formed
//                    before it is added, as the portable path does; db by
//                    the portable fixed-order team reduction
//                    (portable::conv2d_bias_gradient), so db is bitwise the
//                    portable one's.
//
// Determinism (the seam's promises in conv.hpp):
//   * only algorithms cuDNN documents as deterministic (no atomics):
//     forward IMPLICIT_PRECOMP_GEMM, else IMPLICIT_GEMM (every forward
//     algorithm is deterministic); backward-data CUDNN_CONVOLUTION_BWD_DATA_
//     ALGO_1 (ALGO_0 is not deterministic); backward-filter CUDNN_
//     CONVOLUTION_BWD_FILTER_ALGO_1 (ALGO_0 and ALGO_3 are not). FFT and
//     Winograd are never used (deterministic but outside the rounding bound
//     the tests hold every implementation to). The algorithms are fixed,
//     not timed (cudnnFind*), so two runs choose the same ones.
//   * no TF32 or other reduced-precision math by default: the convolution
//     descriptor's math type is CUDNN_FMA_MATH (FMA kernels only, no tensor
//     cores). With pipeline.tf32 (kernels::uses_tf32(conv2d) when the
//     object is constructed) a float convolution's math type is
//     CUDNN_TENSOR_OP_MATH: cuDNN may then run TF32 tensor-core kernels for
//     the same fixed algorithms (fp32 accumulation; no longer within the
//     fp32 rounding bound of the tests, still repeatable).
//   * repeatable: same inputs, same GPU model and library version, same
//     bits (cuDNN, "Reproducibility (Determinism)", for the algorithms
//     above); each object owns its workspace.
//   * each sample's forward output and input gradient independent of n:
//     the same algorithm at every n (a forward that cannot take
//     IMPLICIT_PRECOMP_GEMM at some n is counted, cudnn_fallbacks()), but
//     NVIDIA does not promise that a kernel's reduction order ignores the
//     batch size: tests/unit/test_kernels_cudnn.cpp checks it on a GPU.
//   * dW depends on n (a sum over n*P terms), as in every implementation.
// Compiled with nvcc 13.0 / cuDNN 9.19 (docs/porting.md); not run on a GPU
// by the session that wrote it.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "conv_common.hpp"

namespace gpipe::kernels::cudnn {

static_assert(std::is_same_v<ExecSpace, Kokkos::Cuda>,
              "the cuDNN implementation needs the Kokkos CUDA backend as the default execution space");

namespace {

std::atomic<std::int64_t> fallbacks{0};

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("gpipe::kernels::cudnn: {} failed: {}", what, cudnnGetErrorString(status)));
}

template <class T>
constexpr cudnnDataType_t data_type() {
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

int to_int(std::int64_t v, const char* what) {
  if (v > INT_MAX)
    throw std::invalid_argument(fmt::format("gpipe::kernels::cudnn: {} {} exceeds cuDNN's int range", what, v));
  return int(v);
}

// The process's handle (one host thread calls the seam; the mutex guards
// the handle's stream between cudnnSetStream and the call).
struct Library {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
  Library() { check(cudnnCreate(&handle), "cudnnCreate"); }
  // Not destroyed: the handle lives until the process ends (after
  // Kokkos::finalize a cudnnDestroy could run on a torn-down context).
};

Library& library() {
  static Library* lib = new Library();  // intentionally never deleted
  return *lib;
}

// The descriptors and algorithms of one batch size n.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnConvolutionFwdAlgo_t forward = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  cudnnConvolutionBwdDataAlgo_t data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  std::size_t workspace = 0;  // bytes, the largest of the three
};

template <class T>
class Conv2dCudnn final : public Conv2d<T>::Impl {
 public:
  using Saved = typename Conv2d<T>::Saved;
  using Bias = typename Conv2d<T>::Bias;
  using ConstBias = typename Conv2d<T>::ConstBias;

  explicit Conv2dCudnn(const ConvShape& s) : s_(s) {
    check(cudnnCreateConvolutionDescriptor(&conv_), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetConvolution2dDescriptor(conv_, to_int(s.pad_h, "pad"), to_int(s.pad_w, "pad"),
                                          to_int(s.stride_h, "stride"), to_int(s.stride_w, "stride"), 1, 1,
                                          CUDNN_CROSS_CORRELATION, data_type<T>()),
          "cudnnSetConvolution2dDescriptor");
    const bool tf32 = std::is_same_v<T, float> && uses_tf32(Primitive::conv2d);
    check(cudnnSetConvolutionMathType(conv_, tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
          "cudnnSetConvolutionMathType");
    check(cudnnCreateFilterDescriptor(&filter_), "cudnnCreateFilterDescriptor");
    check(cudnnSetFilter4dDescriptor(filter_, data_type<T>(), CUDNN_TENSOR_NCHW, to_int(s.filters, "filters"),
                                     to_int(s.channels, "channels"), to_int(s.kernel_h, "kernel"),
                                     to_int(s.kernel_w, "kernel")),
          "cudnnSetFilter4dDescriptor");
    check(cudnnCreateTensorDescriptor(&bias_), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, data_type<T>(), 1, int(s.filters), 1, 1),
          "cudnnSetTensor4dDescriptor");
  }

  ~Conv2dCudnn() override {
    for (auto& [n, p] : plans_) {
      cudnnDestroyTensorDescriptor(p.x);
      cudnnDestroyTensorDescriptor(p.y);
    }
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyFilterDescriptor(filter_);
    cudnnDestroyConvolutionDescriptor(conv_);
  }

  void reserve(std::int64_t n) override {
    if (n > 0) grow(nullptr, plan(n).workspace);
  }

  // The workspace bytes of calls of n samples (the memory model's query:
  // cudnn_workspace_bytes); makes the plan, allocates nothing.
  std::size_t workspace_bytes(std::int64_t n) { return n > 0 ? plan(n).workspace : 0; }

  void forward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstBias b, Matrix<T> y,
               Saved) override {
    const std::int64_t n = std::int64_t(x.extent(0));
    if (n == 0) return;
    const Plan& p = plan(n);
    const T one = T(1), zero = T(0);
    auto& lib = library();
    std::lock_guard<std::mutex> lock(lib.mutex);
    check(cudnnSetStream(lib.handle, space.cuda_stream()), "cudnnSetStream");
    check(cudnnConvolutionForward(lib.handle, &one, p.x, x.data(), filter_, w.data(), conv_, p.forward,
                                  grow(&space, p.workspace), p.workspace, &zero, p.y, y.data()),
          "cudnnConvolutionForward");
    if (b.extent(0) > 0)
      check(cudnnAddTensor(lib.handle, &one, bias_, b.data(), &one, p.y, y.data()), "cudnnAddTensor");
  }

  void backward_data(const ExecSpace& space, ConstMatrix<T> dy, ConstMatrix<T> w, Matrix<T> dx) override {
    const std::int64_t n = std::int64_t(dy.extent(0));
    if (n == 0) return;
    const Plan& p = plan(n);
    const T one = T(1), zero = T(0);
    auto& lib = library();
    std::lock_guard<std::mutex> lock(lib.mutex);
    check(cudnnSetStream(lib.handle, space.cuda_stream()), "cudnnSetStream");
    check(cudnnConvolutionBackwardData(lib.handle, &one, filter_, w.data(), p.y, dy.data(), conv_, p.data,
                                       grow(&space, p.workspace), p.workspace, &zero, p.x, dx.data()),
          "cudnnConvolutionBackwardData");
  }

  void backward_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, Saved, Matrix<T> dw,
                        Bias db, bool accumulate) override {
    const std::int64_t n = std::int64_t(dy.extent(0));
    if (db.extent(0) > 0) portable::conv2d_bias_gradient<T>(space, dy, db, s_.pixels(), accumulate);
    if (n == 0) {  // an empty sum: dW = 0 (or unchanged)
      if (!accumulate) Kokkos::deep_copy(space, dw, T(0));
      return;
    }
    const Plan& p = plan(n);
    const T one = T(1), beta = accumulate ? T(1) : T(0);
    auto& lib = library();
    std::lock_guard<std::mutex> lock(lib.mutex);
    check(cudnnSetStream(lib.handle, space.cuda_stream()), "cudnnSetStream");
    check(cudnnConvolutionBackwardFilter(lib.handle, &one, p.x, x.data(), p.y, dy.data(), conv_, p.filter,
                                         grow(&space, p.workspace), p.workspace, &beta, filter_, dw.data()),
          "cudnnConvolutionBackwardFilter");
  }

  void backward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, ConstMatrix<T> w, Saved saved,
                Matrix<T> dw, Bias db, bool accumulate, Matrix<T> dx) override {
    backward_weights(space, x, dy, saved, dw, db, accumulate);
    if (dx.extent(0) > 0) backward_data(space, dy, w, dx);
  }

 private:
  // The plan for n samples, made on first use (a cell calls with its
  // micro-batch sizes only, so a steady-state step makes none), and the
  // workspace grown to fit it.
  const Plan& plan(std::int64_t n) {
    auto it = plans_.find(n);
    if (it != plans_.end()) return it->second;
    const auto& s = s_;
    Plan p;
    check(cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, data_type<T>(), to_int(n, "batch"),
                                     int(s.channels), to_int(s.height, "height"), to_int(s.width, "width")),
          "cudnnSetTensor4dDescriptor");
    int on = 0, oc = 0, oh = 0, ow = 0;
    check(cudnnGetConvolution2dForwardOutputDim(conv_, p.x, filter_, &on, &oc, &oh, &ow),
          "cudnnGetConvolution2dForwardOutputDim");
    if (on != n || oc != s.filters || oh != s.out_h() || ow != s.out_w())
      throw std::logic_error(fmt::format("gpipe::kernels::cudnn: cuDNN's output ({}, {}, {}, {}) is not the "
                                         "seam's ({}, {}, {}, {})",
                                         on, oc, oh, ow, n, s.filters, s.out_h(), s.out_w()));
    check(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, data_type<T>(), on, oc, oh, ow),
          "cudnnSetTensor4dDescriptor");
    auto& lib = library();
    std::size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(lib.handle, p.x, filter_, conv_, p.y, p.forward, &bytes) !=
        CUDNN_STATUS_SUCCESS) {
      p.forward = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
      check(cudnnGetConvolutionForwardWorkspaceSize(lib.handle, p.x, filter_, conv_, p.y, p.forward, &bytes),
            "cudnnGetConvolutionForwardWorkspaceSize (IMPLICIT_GEMM)");
      ++fallbacks;
    }
    p.workspace = bytes;
    check(cudnnGetConvolutionBackwardDataWorkspaceSize(lib.handle, filter_, p.y, conv_, p.x, p.data, &bytes),
          "cudnnGetConvolutionBackwardDataWorkspaceSize (ALGO_1)");
    p.workspace = std::max(p.workspace, bytes);
    check(cudnnGetConvolutionBackwardFilterWorkspaceSize(lib.handle, p.x, p.y, conv_, filter_, p.filter, &bytes),
          "cudnnGetConvolutionBackwardFilterWorkspaceSize (ALGO_1)");
    p.workspace = std::max(p.workspace, bytes);
    return plans_.emplace(n, p).first->second;
  }

  // The workspace, grown to at least `bytes` (grow-only: a steady state
  // allocates nothing). Work queued on `space` may still use the old one,
  // so it is fenced before the old one is freed; without a space (reserve)
  // only a first allocation is made, and a call grows it later.
  void* grow(const ExecSpace* space, std::size_t bytes) {
    if (workspace_.extent(0) < bytes && (workspace_.extent(0) == 0 || space != nullptr)) {
      if (space != nullptr) space->fence("gpipe::Conv2d::cudnn_workspace");
      workspace_ = Kokkos::View<unsigned char*, Kokkos::CudaSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::cudnn_workspace"), bytes);
    }
    return workspace_.data();
  }

  ConvShape s_;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnTensorDescriptor_t bias_ = nullptr;
  std::map<std::int64_t, Plan> plans_;
  Kokkos::View<unsigned char*, Kokkos::CudaSpace> workspace_;
};

}  // namespace

std::string version() {
  const std::size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch from cuDNN 9
  return fmt::format("cuDNN {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

std::int64_t cudnn_fallbacks() { return fallbacks.load(); }

template <class T>
std::unique_ptr<typename Conv2d<T>::Impl> make_conv2d(const ConvShape& shape) {
  return std::make_unique<Conv2dCudnn<T>>(shape);
}

std::int64_t workspace_bytes(const ConvShape& shape, std::int64_t n, int scalar_bytes) {
  try {
    if (scalar_bytes == 8) return std::int64_t(Conv2dCudnn<double>(shape).workspace_bytes(n));
    return std::int64_t(Conv2dCudnn<float>(shape).workspace_bytes(n));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format(
        "gpipe::kernels::cudnn_workspace_bytes: cuDNN gives its workspace sizes only through a handle on a CUDA "
        "device ({}); run on a GPU node, or plan with kernels: portable",
        e.what()));
  }
}

template std::unique_ptr<Conv2d<float>::Impl> make_conv2d<float>(const ConvShape&);
template std::unique_ptr<Conv2d<double>::Impl> make_conv2d<double>(const ConvShape&);

}  // namespace gpipe::kernels::cudnn

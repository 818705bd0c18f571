#pragma once
// 2-D convolution primitives of the kernel seam (gpipe/kernels/backend.hpp
// picks the implementation: Primitive::conv2d). Convolution here is
// cross-correlation, as in every framework; conv1d is the same primitive
// with height = kernel_h = stride_h = 1 and pad_h = 0.
//
// Layouts (row-major Views in the default memory space, as everywhere):
//   x  (n, C*H*W)    each sample NCHW          (PyTorch's input)
//   y  (n, F*OH*OW)  each sample NCHW
//   w  (F, C*KH*KW)  row-major = (F, C, KH, KW) (PyTorch's weight, oneDNN's oihw)
//   b  (F)           extent 0: no bias
//   OH = (H + 2 pad_h - KH) / stride_h + 1 (floor), OW likewise: zero
//   padding of pad_h/pad_w on both sides, trailing rows/columns that no full
//   window reaches are skipped (stride not dividing).
//
// Implementations (one source each, src/kernels/conv_*.cpp):
//   portable  im2col + one KokkosBlas GEMM per sample (Chellapilla et al.
//             2006, Caffe's per-image column layout); the forward's columns
//             are kept in the caller's saved state (saved_per_sample) so
//             backward never recomputes them; the bias gradient is a team
//             reduction in a fixed order. Float and double.
//   onednn    oneDNN convolution forward / backward-data / backward-weights
//             primitives (direct algorithm) on the layouts oneDNN picks
//             (blocked, for its AVX-512 kernels), with reorders from and to
//             the caller's plain Views around each call; primitives and
//             their buffers created once per (shape, n) and kept by the
//             object, so a steady-state step creates none. Float only
//             (oneDNN has no f64 convolution on CPUs); needs no saved state.
//
// Determinism: every implementation gives bitwise the same result for the
// same inputs and call sequence (repeatable; no atomics), and each sample's
// forward output and input gradient are bitwise independent of n (portable:
// one GEMM per sample; oneDNN 2.6.3's direct kernels: checked, not promised
// by oneDNN), so predictions and activations do not depend on the
// micro-batch size (tests/unit/test_kernels_conv.cpp checks both against
// n = 1, single-threaded). The weight and bias gradients (sums over n*OH*OW
// terms) depend on n in every implementation, as any sum over a different
// set of terms does; with several oneDNN threads their reduction order may
// follow the thread count (oneDNN 2.6 has no deterministic mode).

#include <cstdint>
#include <memory>

#include "gpipe/core/views.hpp"
#include "gpipe/kernels/backend.hpp"

namespace gpipe::kernels {

/// Geometry of one 2-D convolution (per sample).
struct ConvShape {
  std::int64_t channels = 1, height = 1, width = 1;  ///< input C, H, W
  std::int64_t filters = 1;                         ///< output channels F
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;  ///< zeros on both sides
  std::int64_t out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  std::int64_t pixels() const { return out_h() * out_w(); }          ///< OH * OW
  std::int64_t taps() const { return channels * kernel_h * kernel_w; }  ///< C * KH * KW
  std::int64_t in_features() const { return channels * height * width; }
  std::int64_t out_features() const { return filters * pixels(); }
};

/// Elements of T per sample that `implementation`'s forward keeps for its
/// backward (the caller owns them, e.g. the cell's saved state): portable:
/// the columns, taps() * pixels(); onednn: 0.
std::int64_t conv2d_saved_per_sample(const ConvShape& shape, Implementation implementation);

/// Convolution primitives (forward, backward-data, backward-weights, each
/// counting one) the oneDNN implementation has created in this process so
/// far; 0 without oneDNN. A steady-state step adds none (each Conv2d
/// creates one set per micro-batch size it sees, on first use).
std::int64_t conv2d_primitives_created();

/// The implementation conv2d runs at T under the choice in force
/// (kernels::implementation(Primitive::conv2d, sizeof(T))).
template <class T>
Implementation conv2d_implementation() {
  return implementation(Primitive::conv2d, int(sizeof(T)));
}

/// One convolution layer's kernels: the implementation chosen at
/// construction, its workspace and (oneDNN) its cached primitives. Not
/// copyable; one host thread at a time. Every call runs on `space` and may
/// return before the work is done only as far as `space` allows (Serial and
/// oneDNN: done on return).
///
/// `saved`: a View of at least saved_per_sample() * n elements that the
/// training forward writes and the backward of the same micro-batch reads
/// (untouched in between); extent 0 (or too small) means none: the
/// portable backward then recomputes the columns from x. Throws
/// std::invalid_argument when an extent does not match the shape.
template <class T>
class Conv2d {
 public:
  using Saved = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Bias = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ConstBias = Kokkos::View<const T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  /// `implementation` must be available at T (kernels::has); throws
  /// std::invalid_argument otherwise.
  Conv2d(const ConvShape& shape, Implementation implementation);
  ~Conv2d();
  Conv2d(const Conv2d&) = delete;
  Conv2d& operator=(const Conv2d&) = delete;

  const ConvShape& shape() const { return shape_; }
  Implementation implementation() const { return implementation_; }
  /// conv2d_saved_per_sample(shape(), implementation()).
  std::int64_t saved_per_sample() const;
  /// Allocates the workspace for calls of up to `n` samples (calls grow it
  /// on first use otherwise).
  void reserve(std::int64_t n);

  /// y = w * x + b. x (n, C*H*W), w (F, taps), b (F) or extent 0, y (n, F*P);
  /// writes `saved` when it is large enough (training).
  void forward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstBias b, Matrix<T> y,
               Saved saved);
  /// dx = dL/dx from dy = dL/dy (n, F*P) and w; dx (n, C*H*W) written.
  void backward_data(const ExecSpace& space, ConstMatrix<T> dy, ConstMatrix<T> w, Matrix<T> dx);
  /// dw (F, taps) and db (F, or extent 0) from x, dy and the forward's
  /// saved state: added when `accumulate`, written otherwise (their old
  /// contents then never read).
  void backward_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, Saved saved, Matrix<T> dw,
                        Bias db, bool accumulate);
  /// backward_weights then backward_data (dx skipped when its extent 0 is
  /// 0), bitwise equal to the two calls.
  void backward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, ConstMatrix<T> w, Saved saved,
                Matrix<T> dw, Bias db, bool accumulate, Matrix<T> dx);

  /// The implementation behind the seam (src/kernels/conv_*.cpp).
  struct Impl;

 private:
  ConvShape shape_;
  Implementation implementation_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpipe::kernels

// Public entry points of the kernel seam's convolution (gpipe/kernels/conv.hpp):
// argument checks, then the implementation chosen at construction.
#include <fmt/format.h>

#include <atomic>
#include <stdexcept>
#include <type_traits>

#include "conv_common.hpp"
#include "gpipe/config.hpp"
#include "reduced.hpp"

namespace gpipe::kernels {

namespace {

void require(bool ok, const char* what, const std::string& detail) {
  if (!ok) throw std::invalid_argument(fmt::format("gpipe::kernels::Conv2d::{}: {}", what, detail));
}

template <class V>
std::string dims(const V& v) {
  return fmt::format("({}, {})", v.extent(0), v.extent(1));
}

std::atomic<std::int64_t> primitives_created{0};

// The reduced compute format (backend.hpp, set_compute_format): x, w and dy
// rounded into the seam's workspace (x and dy in the GEMMs' slots a and b,
// which the memory model counts; w read from the rounded weight copy where
// one is registered) before the implementation runs on them
// (fp32 accumulation and results); `m` itself at fp32 (and for double).
// oneDNN's bf16 convolution (where implementation(conv2d, 2) is oneDNN)
// converts them itself (conv_onednn.cpp).
template <class T>
ConstMatrix<T> operand(const ExecSpace& space, ConstMatrix<T> m, int slot, Implementation implementation) {
  if constexpr (std::is_same_v<T, float>) {
    const Format f = compute_format();
    if (f == Format::bf16 && implementation == Implementation::onednn &&
        kernels::implementation(Primitive::conv2d, 2) == Implementation::onednn)
      return m;
    if (reduced::active(f) && m.span() > 0) return reduced::rounded(space, f, m, slot);
  }
  (void)implementation;
  (void)space;
  (void)slot;
  return m;
}

}  // namespace

void count_conv2d_primitives(std::int64_t count) { primitives_created += count; }

std::int64_t conv2d_primitives_created() { return primitives_created.load(); }

std::int64_t cudnn_workspace_bytes(const ConvShape& shape, std::int64_t n, int scalar_bytes) {
  require(scalar_bytes == 4 || scalar_bytes == 8, "cudnn_workspace_bytes",
          fmt::format("{} bytes per scalar (cuDNN runs float and double)", scalar_bytes));
#ifdef GPIPE_ENABLE_CUDNN
  return cudnn::workspace_bytes(shape, n, scalar_bytes);
#else
  (void)shape;
  (void)n;
  throw std::invalid_argument("gpipe::kernels::cudnn_workspace_bytes: this build has no cuDNN (GPIPE_ENABLE_CUDNN=OFF)");
#endif
}

std::int64_t conv2d_saved_per_sample(const ConvShape& shape, Implementation implementation) {
  return implementation == Implementation::portable ? shape.taps() * shape.pixels() : 0;
}

template <class T>
Conv2d<T>::Conv2d(const ConvShape& shape, Implementation implementation)
    : shape_(shape), implementation_(implementation) {
  require(shape.channels >= 1 && shape.height >= 1 && shape.width >= 1 && shape.filters >= 1 &&
              shape.kernel_h >= 1 && shape.kernel_w >= 1 && shape.stride_h >= 1 && shape.stride_w >= 1 &&
              shape.pad_h >= 0 && shape.pad_w >= 0 && shape.height + 2 * shape.pad_h >= shape.kernel_h &&
              shape.width + 2 * shape.pad_w >= shape.kernel_w,
          "Conv2d", fmt::format("invalid shape C {} H {} W {} F {} kernel {}x{} stride {}x{} pad {}x{}",
                                shape.channels, shape.height, shape.width, shape.filters, shape.kernel_h,
                                shape.kernel_w, shape.stride_h, shape.stride_w, shape.pad_h, shape.pad_w));
  require(has(implementation, Primitive::conv2d, int(sizeof(T))), "Conv2d",
          fmt::format("this build has no {} conv2d at {} bytes per scalar", name(implementation), sizeof(T)));
  if (implementation == Implementation::portable) {
    impl_ = portable::make_conv2d<T>(shape);
  } else {
#ifdef GPIPE_ENABLE_ONEDNN
    if constexpr (std::is_same_v<T, float>)
      if (implementation == Implementation::onednn) impl_ = onednn::make_conv2d(shape);
#endif
#ifdef GPIPE_ENABLE_CUDNN
    if (implementation == Implementation::cudnn) impl_ = cudnn::make_conv2d<T>(shape);
#endif
  }
  require(bool(impl_), "Conv2d", fmt::format("no {} conv2d implementation", name(implementation)));
}

template <class T>
Conv2d<T>::~Conv2d() = default;

template <class T>
std::int64_t Conv2d<T>::saved_per_sample() const {
  return conv2d_saved_per_sample(shape_, implementation_);
}

template <class T>
void Conv2d<T>::reserve(std::int64_t n) {
  impl_->reserve(n);
}

template <class T>
void Conv2d<T>::forward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstBias b, Matrix<T> y,
                        Saved saved) {
  const auto& s = shape_;
  require(std::int64_t(x.extent(1)) == s.in_features() && y.extent(0) == x.extent(0) &&
              std::int64_t(y.extent(1)) == s.out_features() && std::int64_t(w.extent(0)) == s.filters &&
              std::int64_t(w.extent(1)) == s.taps() && (b.extent(0) == 0 || std::int64_t(b.extent(0)) == s.filters),
          "forward", fmt::format("x {}, w {}, b ({}), y {} for C*H*W {}, F*P {}, taps {}", dims(x), dims(w),
                                 b.extent(0), dims(y), s.in_features(), s.out_features(), s.taps()));
  if (x.extent(0) == 0) return;
  impl_->forward(space, operand(space, x, reduced::a, implementation_), operand(space, w, reduced::w, implementation_), b, y, saved);
}

template <class T>
void Conv2d<T>::backward_data(const ExecSpace& space, ConstMatrix<T> dy, ConstMatrix<T> w, Matrix<T> dx) {
  const auto& s = shape_;
  require(std::int64_t(dy.extent(1)) == s.out_features() && dx.extent(0) == dy.extent(0) &&
              std::int64_t(dx.extent(1)) == s.in_features() && std::int64_t(w.extent(0)) == s.filters &&
              std::int64_t(w.extent(1)) == s.taps(),
          "backward_data", fmt::format("dy {}, w {}, dx {}", dims(dy), dims(w), dims(dx)));
  if (dy.extent(0) == 0) return;
  impl_->backward_data(space, operand(space, dy, reduced::b, implementation_), operand(space, w, reduced::w, implementation_), dx);
}

template <class T>
void Conv2d<T>::backward_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, Saved saved,
                                 Matrix<T> dw, Bias db, bool accumulate) {
  const auto& s = shape_;
  require(std::int64_t(x.extent(1)) == s.in_features() && dy.extent(0) == x.extent(0) &&
              std::int64_t(dy.extent(1)) == s.out_features() && std::int64_t(dw.extent(0)) == s.filters &&
              std::int64_t(dw.extent(1)) == s.taps() &&
              (db.extent(0) == 0 || std::int64_t(db.extent(0)) == s.filters),
          "backward_weights", fmt::format("x {}, dy {}, dw {}, db ({})", dims(x), dims(dy), dims(dw), db.extent(0)));
  impl_->backward_weights(space, operand(space, x, reduced::a, implementation_), operand(space, dy, reduced::b, implementation_), saved, dw, db,
                          accumulate);
}

template <class T>
void Conv2d<T>::backward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, ConstMatrix<T> w,
                         Saved saved, Matrix<T> dw, Bias db, bool accumulate, Matrix<T> dx) {
  const auto& s = shape_;
  require(std::int64_t(x.extent(1)) == s.in_features() && dy.extent(0) == x.extent(0) &&
              std::int64_t(dy.extent(1)) == s.out_features() && std::int64_t(dw.extent(0)) == s.filters &&
              std::int64_t(dw.extent(1)) == s.taps() && std::int64_t(w.extent(0)) == s.filters &&
              std::int64_t(w.extent(1)) == s.taps() &&
              (db.extent(0) == 0 || std::int64_t(db.extent(0)) == s.filters) &&
              (dx.extent(0) == 0 || (dx.extent(0) == x.extent(0) && std::int64_t(dx.extent(1)) == s.in_features())),
          "backward", fmt::format("x {}, dy {}, w {}, dw {}, db ({}), dx {}", dims(x), dims(dy), dims(w), dims(dw),
                                  db.extent(0), dims(dx)));
  impl_->backward(space, operand(space, x, reduced::a, implementation_), operand(space, dy, reduced::b, implementation_),
                  operand(space, w, reduced::w, implementation_), saved, dw, db, accumulate, dx);
}

#define GPIPE_INSTANTIATE(T) template class Conv2d<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels

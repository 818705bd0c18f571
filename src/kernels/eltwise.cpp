// Element-wise activation primitives of the kernel seam (eltwise.hpp): the
// oneDNN float implementation where it is in force, else false (the layer's
// own loop is the portable implementation). The compute format does not
// enter: an activation is fp32 work under every policy (bf16 and fp16
// round only the operands of the heavy primitives, backend.hpp), so a
// reduced-precision run takes the float implementation too.
#include "gpipe/kernels/eltwise.hpp"

#include <type_traits>

#include "gpipe/config.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/kernels/backend.hpp"
#include "implementations.hpp"

namespace gpipe::kernels {

namespace {
template <class T>
bool onednn_eltwise() {
#ifdef GPIPE_ENABLE_ONEDNN
  return std::is_same_v<T, float> && implementation(Primitive::eltwise, int(sizeof(T))) == Implementation::onednn;
#else
  return false;
#endif
}
}  // namespace

template <class T>
bool eltwise_forward(const ExecSpace& space, Eltwise f, const T* x, T* y, std::int64_t n) {
#ifdef GPIPE_ENABLE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (!onednn_eltwise<T>()) return false;
    if (n > 0) onednn::eltwise_forward(space, f, x, y, n);
    return true;
  }
#endif
  (void)space, (void)f, (void)x, (void)y, (void)n;
  return false;
}

template <class T>
bool eltwise_backward(const ExecSpace& space, Eltwise f, const T* x, const T* dy, T* dx, std::int64_t n) {
#ifdef GPIPE_ENABLE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (!onednn_eltwise<T>()) return false;
    if (n > 0) onednn::eltwise_backward(space, f, x, dy, dx, n);
    return true;
  }
#endif
  (void)space, (void)f, (void)x, (void)dy, (void)dx, (void)n;
  return false;
}

#define GPIPE_INSTANTIATE(T)                                                               \
  template bool eltwise_forward<T>(const ExecSpace&, Eltwise, const T*, T*, std::int64_t); \
  template bool eltwise_backward<T>(const ExecSpace&, Eltwise, const T*, const T*, T*, std::int64_t);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels

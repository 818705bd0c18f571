// Portable attention implementation of the kernel seam: the shared
// attention_common.hpp with the portable strided-batched GEMM.
#include "attention_common.hpp"
#include "gpipe/core/precision.hpp"

namespace gpipe::kernels::portable {

namespace {
struct Batched {
  template <class T>
  void operator()(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc) const {
    portable::batched_gemm<T>(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  }
};
}  // namespace

template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv, Matrix<T> probs,
                       Matrix<T> out) {
  detail::attention_forward<T>(space, shape, qkv, probs, out, Batched{});
}

template <class T>
void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                        ConstMatrix<T> probs, ConstMatrix<T> d_out, Matrix<T> work, Matrix<T> d_qkv) {
  detail::attention_backward<T>(space, shape, qkv, probs, d_out, work, d_qkv, Batched{});
}

#define GPIPE_INSTANTIATE(T) \
  template void attention_forward<T>(const ExecSpace&, const AttentionShape&, ConstMatrix<T>, Matrix<T>, Matrix<T>); \
  template void attention_backward<T>(const ExecSpace&, const AttentionShape&, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, Matrix<T>, Matrix<T>);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels::portable

// oneDNN attention implementation of the kernel seam (float): the shared
// attention_common.hpp with oneDNN's batched matmul (gemm_onednn.cpp) for
// the five GEMMs, one primitive over every (sample, head) per GEMM; the
// (masked) softmax stays the fused Kokkos kernel (one pass per row; oneDNN
// 2.6's softmax has no mask).
#include "attention_common.hpp"

namespace gpipe::kernels::onednn {

namespace {
struct Batched {
  void operator()(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                  const float* a, const Strided& sa, const float* b, const Strided& sb, float beta, float* c,
                  const Strided& sc) const {
    onednn::batched_gemm(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  }
};
}  // namespace

void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                       Matrix<float> probs, Matrix<float> out) {
  detail::attention_forward<float>(space, shape, qkv, probs, out, Batched{});
}

void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                        ConstMatrix<float> probs, ConstMatrix<float> d_out, Matrix<float> work,
                        Matrix<float> d_qkv) {
  detail::attention_backward<float>(space, shape, qkv, probs, d_out, work, d_qkv, Batched{});
}

}  // namespace gpipe::kernels::onednn

#pragma once
// Internal: the implementations behind the kernel seam, one namespace each
// (one source file per implementation and primitive family:
// gemm_portable.cpp, gemm_onednn.cpp, attention_portable.cpp, ...). The
// public entry points (dispatch.cpp) check the arguments and call the one
// backend.cpp picks. A new implementation (e.g. cuBLASLt) adds a namespace
// here, its files, a case in dispatch.cpp and its rows in backend.cpp.

#include "gpipe/core/half.hpp"
#include "gpipe/kernels/attention.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/eltwise.hpp"
#include "gpipe/kernels/gemm.hpp"

#include <string>

namespace gpipe::kernels {

namespace portable {
template <class T>
void gemm(const ExecSpace& space, Op ta, Op tb, T alpha, ConstMatrix<T> a, ConstMatrix<T> b, T beta,
          Matrix<T> c);
template <class T>
void gemm_bias(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias, Matrix<T> y);
template <class T>
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc);
template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                       Matrix<T> probs, Matrix<T> out);
template <class T>
void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                        ConstMatrix<T> probs, ConstMatrix<T> d_out, Matrix<T> work, Matrix<T> d_qkv);
}  // namespace portable

// Defined only in builds with GPIPE_ENABLE_ONEDNN, at float only (oneDNN
// 2.6 has no f64 matmul on CPUs); backend.cpp never picks them otherwise.
namespace onednn {
void gemm(const ExecSpace& space, Op ta, Op tb, float alpha, ConstMatrix<float> a, ConstMatrix<float> b,
          float beta, Matrix<float> c);
void gemm_bias(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstMatrix<float> bias,
               Matrix<float> y);
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                  const float* a, const Strided& sa, const float* b, const Strided& sb, float beta, float* c,
                  const Strided& sc);
void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                       Matrix<float> probs, Matrix<float> out);
void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                        ConstMatrix<float> probs, ConstMatrix<float> d_out, Matrix<float> work,
                        Matrix<float> d_qkv);
// oneDNN's softmax over `rows` rows of `tokens` contiguous floats, in place
// (causal: the masked entries set to -inf first), and its backward
// (dprobs = P .* (dprobs - rowsum(P .* dprobs)) in place): the attention's
// fp32 softmax at float and under a reduced compute format (dispatch.cpp).
void softmax_forward(const ExecSpace& space, float* probs, std::int64_t rows, std::int64_t tokens, bool causal);
void softmax_backward(const ExecSpace& space, const float* probs, float* dprobs, std::int64_t rows,
                      std::int64_t tokens, bool causal);
// Prepacked parameter operands (gemm.hpp): `scope` is FrozenWeights::current(); 0 runs gemm_bias / gemm.
void gemm_bias_weights(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstMatrix<float> bias,
                       Matrix<float> y, std::uint64_t scope);
void gemm_weights(const ExecSpace& space, Op ta, Op tw, float alpha, ConstMatrix<float> a, ConstMatrix<float> w,
                  float beta, Matrix<float> c, std::uint64_t scope);
std::int64_t packed_bytes();  // bytes of the packed copies held (gemm_onednn.cpp)
void drop_unused_packs(std::uint64_t scope);  // drops the W not used in `scope` (its end)
// Packs one held W inside [begin, end) not yet packed in `scope` (idle time,
// FrozenWeights::pack_next); false when there is none.
bool pack_next(std::uint64_t scope, const void* begin, const void* end);
// Element-wise activations over n contiguous floats (eltwise_onednn.cpp).
void eltwise_forward(const ExecSpace& space, Eltwise f, const float* x, float* y, std::int64_t n);
void eltwise_backward(const ExecSpace& space, Eltwise f, const float* x, const float* dy, float* dx, std::int64_t n);
// bf16 operands (row-major, as the float ones; converted by dispatch.cpp),
// fp32 accumulation, fp32 results and bias. Throw std::runtime_error with
// a clear message where the CPU has no bf16 matmul.
void gemm_bf16(const ExecSpace& space, Op ta, Op tb, float alpha, const bf16* a, std::int64_t ar, std::int64_t ac,
               const bf16* b, std::int64_t br, std::int64_t bc, float beta, Matrix<float> c);
void gemm_bias_bf16(const ExecSpace& space, const bf16* x, std::int64_t m, std::int64_t k, const bf16* w,
                    std::int64_t n, ConstMatrix<float> bias, Matrix<float> y);
void batched_gemm_bf16(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                       const bf16* a, const Strided& sa, const bf16* b, const Strided& sb, float beta, float* c,
                       const Strided& sc);
// The same products with W an fp32 parameter (inside the registered bf16
// weight copy's range) in a FrozenWeights scope (`scope` nonzero): W
// converted and packed into the matmul's blocked bf16 layout once per scope
// and form, bitwise the plain bf16 product on the weight copy.
void gemm_bias_weights_bf16(const ExecSpace& space, const bf16* x, std::int64_t m, std::int64_t k, const float* w,
                            std::int64_t n, ConstMatrix<float> bias, Matrix<float> y, std::uint64_t scope);
void gemm_weights_bf16(const ExecSpace& space, Op ta, Op tw, float alpha, const bf16* a, std::int64_t ar,
                       std::int64_t ac, const float* w, std::int64_t wr, std::int64_t wc, float beta, Matrix<float> c,
                       std::uint64_t scope);
// fp32 <-> bf16 over n contiguous values (convert_onednn.cpp): a reorder,
// round to nearest even with subnormal inputs flushed to zero (fp32 ->
// bf16), exact (bf16 -> fp32).
void to_bf16(const ExecSpace& space, const float* src, std::int64_t n, bf16* dst);
void from_bf16(const ExecSpace& space, const bf16* src, std::int64_t n, float* dst);
// values[i] = float(bf16(values[i])) in place (to_bf16 then from_bf16).
void round_bf16(const ExecSpace& space, float* values, std::int64_t n);
// One strided copy of a dims-shaped array (rank 1-6, dims[r] > 0): element
// at index (i_0, .., i_r) read at src + sum i_k src_strides[k] and written at
// dst + sum i_k dst_strides[k] (strides in elements, the destination's not
// overlapping), converted fp32 -> bf16 (the same rounding as to_bf16); one
// reorder, cached per (dims, strides). The attention's head-major and
// transposed bf16 operands (dispatch.cpp).
void strided_to_bf16(const ExecSpace& space, const float* src, const std::vector<std::int64_t>& dims,
                     const std::vector<std::int64_t>& src_strides, bf16* dst,
                     const std::vector<std::int64_t>& dst_strides);
/// "oneDNN 2.6.3" (the library loaded at run time).
std::string version();
/// The CPU's vendor (x86 CPUID) and the bf16 ISAs oneDNN may dispatch
/// (dnnl::get_effective_cpu_isa(), so ONEDNN_MAX_CPU_ISA is honoured);
/// kernels::this_cpu() in builds with oneDNN. Asked once.
CpuTraits cpu_traits();
}  // namespace onednn

// Defined only in builds with GPIPE_ENABLE_CUBLAS (src/kernels/gemm_cublas.cpp),
// at float and double; backend.cpp never picks them otherwise.
namespace cublas {
/// The cuBLAS / cuBLASLt workspace per stream (cuBLAS' own default on
/// Hopper; kernels::cublas_workspace_bytes).
constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;
template <class T>
void gemm(const ExecSpace& space, Op ta, Op tb, T alpha, ConstMatrix<T> a, ConstMatrix<T> b, T beta,
          Matrix<T> c);
template <class T>
void gemm_bias(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias, Matrix<T> y);
template <class T>
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc);
/// "cuBLAS 13.0.0" (cuBLASLt's version at run time).
std::string version();
/// GEMM shapes whose row count the reference algorithm did not fit (their
/// rows may differ in the last bits from another row count's).
std::int64_t cublas_fallbacks();
}  // namespace cublas

}  // namespace gpipe::kernels

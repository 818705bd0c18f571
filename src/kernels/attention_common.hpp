#pragma once
// Internal: scaled-dot-product attention (gpipe/kernels/attention.hpp) as
// five strided-batched GEMMs over every (sample, head) pair at once plus one
// fused (masked) softmax kernel each way. `Batched` is an implementation's
// batched_gemm (portable: KokkosBatched team GEMMs; oneDNN: one batched
// matmul primitive per call), so each implementation shares the layout and
// the softmax code and differs only in the GEMMs.

#include <cmath>

#include "gpipe/core/kokkos_compat.hpp"
#include "implementations.hpp"

namespace gpipe::kernels::detail {

// Operand descriptions of one (sample, head) in the interleaved layout.
struct AttentionLayout {
  std::int64_t n, T, H, dh, d;
  Strided qkv, out, probs;
  explicit AttentionLayout(const AttentionShape& s)
      : n(s.samples), T(s.tokens), H(s.heads), dh(s.head_width), d(s.heads * s.head_width) {
    qkv = Strided{T, dh, 3 * d, T * 3 * d, dh};
    out = Strided{T, dh, d, T * d, dh};
    probs = Strided{T, T, T, H * T * T, T * T};
  }
};

// probs rows (n*H*T of T): exp(S - max) / sum in place, entries s > t (t =
// row % T) exactly 0 when causal. One row per work item, summed in column order.
template <class T>
void masked_softmax(const ExecSpace& space, T* probs, std::int64_t rows, std::int64_t tokens, bool causal) {
  Kokkos::parallel_for(
      "gpipe::kernels::attention::softmax", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
      KOKKOS_LAMBDA(const std::int64_t r) {
        T* p = probs + r * tokens;
        const std::int64_t last = causal ? r % tokens : tokens - 1;  // last unmasked column
        T top = p[0];
        for (std::int64_t s = 1; s <= last; ++s) top = p[s] > top ? p[s] : top;
        T sum = T(0);
        for (std::int64_t s = 0; s <= last; ++s) {
          p[s] = compat::exp(p[s] - top);
          sum += p[s];
        }
        const T inv = T(1) / sum;
        for (std::int64_t s = 0; s <= last; ++s) p[s] *= inv;
        for (std::int64_t s = last + 1; s < tokens; ++s) p[s] = T(0);
      });
}

// dS = P .* (dP - rowsum(P .* dP)) in place of dP. Causal: the masked
// entries (s > t, where P is exactly 0) are written 0 without being read.
template <class T>
void softmax_backward(const ExecSpace& space, const T* probs, T* dprobs, std::int64_t rows, std::int64_t tokens,
                      bool causal) {
  Kokkos::parallel_for(
      "gpipe::kernels::attention::softmax_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const T* p = probs + r * tokens;
        T* dp = dprobs + r * tokens;
        const std::int64_t last = causal ? r % tokens : tokens - 1;
        T dot = T(0);
        for (std::int64_t s = 0; s <= last; ++s) dot += p[s] * dp[s];
        for (std::int64_t s = 0; s <= last; ++s) dp[s] = p[s] * (dp[s] - dot);
        for (std::int64_t s = last + 1; s < tokens; ++s) dp[s] = T(0);
      });
}

template <class T, class Batched>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv, Matrix<T> probs,
                       Matrix<T> out, Batched batched) {
  const AttentionLayout L(shape);
  const T scale = T(1) / T(std::sqrt(double(L.dh)));
  const T* q = qkv.data();
  batched(space, Op::none, Op::transpose, L.n, L.H, scale, q, L.qkv, q + L.d, L.qkv, T(0), probs.data(),
          L.probs);
  masked_softmax<T>(space, probs.data(), L.n * L.H * L.T, L.T, shape.causal);
  batched(space, Op::none, Op::none, L.n, L.H, T(1), probs.data(), L.probs, q + 2 * L.d, L.qkv, T(0),
          out.data(), L.out);
}

template <class T, class Batched>
void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                        ConstMatrix<T> probs, ConstMatrix<T> d_out, Matrix<T> work, Matrix<T> d_qkv,
                        Batched batched) {
  const AttentionLayout L(shape);
  const T scale = T(1) / T(std::sqrt(double(L.dh)));
  const T *q = qkv.data(), *k = q + L.d, *v = q + 2 * L.d, *p = probs.data(), *dout = d_out.data();
  T *dq = d_qkv.data(), *dk = dq + L.d, *dv = dq + 2 * L.d, *ds = work.data();
  batched(space, Op::transpose, Op::none, L.n, L.H, T(1), p, L.probs, dout, L.out, T(0), dv, L.qkv);
  batched(space, Op::none, Op::transpose, L.n, L.H, T(1), dout, L.out, v, L.qkv, T(0), ds, L.probs);
  softmax_backward<T>(space, p, ds, L.n * L.H * L.T, L.T, shape.causal);
  batched(space, Op::none, Op::none, L.n, L.H, scale, ds, L.probs, k, L.qkv, T(0), dq, L.qkv);
  batched(space, Op::transpose, Op::none, L.n, L.H, scale, ds, L.probs, q, L.qkv, T(0), dk, L.qkv);
}

}  // namespace gpipe::kernels::detail

#pragma once
// Scaled-dot-product attention of the kernel seam (Vaswani et al. 2017,
// eq. 1), multi-head, with an optional causal mask (gpipe/kernels/backend.hpp
// picks the implementation). Row-major matrices in the default memory space;
// nothing is allocated in steady state.
//
// Layout (as transformer_block stores it): the n samples' T tokens are the
// rows of qkv (n*T, 3d) = [Q | K | V], head h in columns h*dh .. h*dh+dh-1
// of each third (d = H * dh). Per (sample i, head h):
//   S = Q K^T / sqrt(dh)                           (T, T)
//   causal: S(t, s) = -inf for s > t (token t sees tokens 0..t)
//   P = softmax_rows(S)  (each row's maximum subtracted before exp; masked
//                         entries are exactly 0)
//   O = P V, written to columns h*dh.. of out (n*T, d)
// P is stored as probs (n*H*T, T): row (i*H + h)*T + t.
// Backward (P saved by the forward):
//   dV = P^T dO; dP = dO V^T; dS = P .* (dP - rowsum(P .* dP));
//   dQ = dS K / sqrt(dh); dK = dS^T Q / sqrt(dh)
// (masked entries of dS are 0 because P is).
// FLOPs: forward 4 n T^2 d + 5 n H T^2, backward 8 n T^2 d + 4 n H T^2.

#include <cstdint>

#include "gpipe/core/views.hpp"

namespace gpipe::kernels {

/// The problem: n samples of T tokens, H heads of width dh.
struct AttentionShape {
  std::int64_t samples = 0, tokens = 0, heads = 1, head_width = 0;
  bool causal = false;
};

/// probs (n*H*T, T) = P; out (n*T, H*dh) = O. qkv (n*T, 3*H*dh).
/// Throws std::invalid_argument when an extent does not match `shape`.
template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                       Matrix<T> probs, Matrix<T> out);

/// d_qkv (n*T, 3*H*dh) = [dQ | dK | dV] from qkv and probs (the forward's)
/// and d_out (n*T, H*dh); work (n*H*T, T) is scratch (overwritten).
/// Throws std::invalid_argument when an extent does not match `shape`.
template <class T>
void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                        ConstMatrix<T> probs, ConstMatrix<T> d_out, Matrix<T> work, Matrix<T> d_qkv);

}  // namespace gpipe::kernels

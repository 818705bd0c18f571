#pragma once
// GEMM primitives of the kernel seam (gpipe/kernels/backend.hpp picks the
// implementation). Every matrix is row-major (LayoutRight) in the default
// memory space, as everywhere in gpipe; the caller owns all memory and the
// primitives allocate nothing in steady state (the oneDNN implementation
// creates a primitive once per shape and caches it).
//
// Determinism: for every implementation, row i of the result depends only on
// row i of the row operand (X / op(A)) and on the other operand, not on how
// many rows the call has, and repeated calls give bitwise the same result
// (tests/unit/test_kernels_gemm.cpp checks both), so results stay bitwise
// equal across micro-batch counts, re-materialization and schedules.
// Rounding differs between implementations (each one is deterministic on
// its own).

#include <cstdint>

#include "gpipe/core/views.hpp"

namespace gpipe::kernels {

/// Transposition of a GEMM operand.
enum class Op { none, transpose };

/// C = alpha op(A) op(B) + beta C, op(A) (m, k), op(B) (k, n), C (m, n);
/// beta = 0 writes C without reading it (NaN in C does not propagate).
/// Runs on `space` (Kokkos Kernels 3.4's gemm has no instance overload and
/// uses the default instance; with Serial they are the same).
/// Throws std::invalid_argument when the extents do not match.
template <class T>
void gemm(const ExecSpace& space, Op ta, Op tb, T alpha, ConstMatrix<T> a, ConstMatrix<T> b, T beta,
          Matrix<T> c);

/// Dense layer forward with a bias epilogue: Y = X W + b (b broadcast over
/// the rows). X (n, in), W (in, out), bias (1, out), Y (n, out); X and Y do
/// not alias. Throws std::invalid_argument when the extents do not match.
template <class T>
void gemm_bias(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias,
               Matrix<T> y);

/// Parameter operands: the same products as gemm_bias and gemm with B a
/// parameter matrix W (a layer's weight, or op(W) its transpose), which a
/// FrozenWeights scope promises unchanged. Outside a scope they are exactly
/// gemm_bias(space, x, w, bias, y) and gemm(space, ta, tw, alpha, a, w,
/// beta, c). Inside one, the oneDNN float implementation (no reduced
/// compute format) keeps W reordered once into its matmul's blocked layout
/// (format_tag::any), from the second product with the same W, form and
/// shape on, instead of reordering it inside every call: a micro-batch of
/// 32 rows times a 1024 x 1024 W then runs at about 0.8x instead of 0.65x
/// the 256-row rate (perf/README.md, "Issue 21: prepacked weights"). The
/// results are bitwise those of the unpacked products (the same kernel and
/// reduction order: tests/unit/test_kernels_gemm.cpp, PackedWeights*). The
/// packed copies (one per W and form, W's bytes each) are oneDNN memory,
/// allocated at the first packing and kept while every scope uses their W
/// (a steady-state step allocates nothing); the end of a scope drops those
/// of the W it did not use. They are not in Kokkos' memory accounting.
/// With the bf16 compute format on oneDNN's bf16 primitives, a W inside
/// the registered weight copy's range (backend.hpp, WeightCopy) is packed
/// too, at its first use in a scope: converted from the fp32 parameters to
/// bf16 and reordered into the matmul's blocked layout in one pass (W's
/// bytes / 2 per form), bitwise the plain bf16 product on the copy
/// (tests/unit/test_reduced_precision.cpp, PackedBf16WeightsBitwisePlain).
/// Throws std::invalid_argument as gemm_bias / gemm do.
template <class T>
void gemm_bias_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias,
                       Matrix<T> y);
template <class T>
void gemm_weights(const ExecSpace& space, Op ta, Op tw, T alpha, ConstMatrix<T> a, ConstMatrix<T> w, T beta,
                  Matrix<T> c);

/// While an object of this class lives, the caller promises that no matrix
/// passed as `w` to gemm_bias_weights / gemm_weights changes (contents or
/// lifetime): a training step between the optimizer updates
/// (Pipeline::step holds one around the cell's forward and backward
/// passes). Scopes nest (the outermost one counts); destroying the
/// outermost one invalidates every packed copy, so weights may change
/// freely outside. Not thread-safe: one host thread per process calls the
/// seam.
class FrozenWeights {
 public:
  FrozenWeights();
  /// A scope whose weights lie in the `bytes` bytes at `weights` (a cell's
  /// parameter vector; Pipeline::step passes it): pack_next() may pack
  /// those ahead of their first product. Only the outermost scope's range
  /// counts.
  FrozenWeights(const void* weights, std::int64_t bytes);
  ~FrozenWeights();
  FrozenWeights(const FrozenWeights&) = delete;
  FrozenWeights& operator=(const FrozenWeights&) = delete;
  /// The live outermost scope's number (nonzero, unique in the process), 0 outside any scope.
  static std::uint64_t current();
  /// For idle time (a stage waiting for a message): packs one W that the
  /// previous scope packed, that lies in this scope's range and that this
  /// scope has not packed yet, so that its first product of the scope runs
  /// packed too (bitwise the same products; at most one W's reorder, a
  /// fraction of a millisecond, so the caller can test for its message
  /// between calls). Returns false when there is none, outside a scope, for
  /// a scope without a range, below AVX-512 and without oneDNN.
  static bool pack_next();
  /// Bytes of the packed copies this process holds (0 without oneDNN or
  /// before the first packing), outside Kokkos' memory accounting.
  static std::int64_t packed_bytes();
};

/// Reuse of reduced-precision operand copies: while an object of this class
/// lives (scopes nest; the outermost counts), a float operand that a GEMM
/// of the seam converts to bf16 (the native bf16 route: compute format bf16
/// with oneDNN's bf16 primitives) stays converted, and a later GEMM of the
/// scope reading a range inside it reads that copy instead of converting
/// it again: the same bf16 values, so bitwise the same results. The caller
/// promises that, while the scope lives, no operand range it passed is
/// written except as the output of a seam GEMM (an output drops the copies
/// it overlaps). Dense::backward holds one around its weight and input
/// gradients, which both read dY. No effect on other routes and formats.
/// Not thread-safe: one host thread per process calls the seam.
class OperandReuse {
 public:
  OperandReuse();
  ~OperandReuse();
  OperandReuse(const OperandReuse&) = delete;
  OperandReuse& operator=(const OperandReuse&) = delete;
};

/// One operand of a strided-batched GEMM over a 2-level batch (outer,
/// inner): matrix (o, i) is the row-major (rows, cols) matrix at
/// data + o * outer_stride + i * inner_stride with leading dimension ld
/// (>= cols), in elements. This addresses one head of every sample inside
/// an interleaved (samples * tokens, 3 * width) qkv matrix without a copy.
struct Strided {
  std::int64_t rows = 0, cols = 0, ld = 0, outer_stride = 0, inner_stride = 0;
};

/// For every (o, i) in [0, outer) x [0, inner):
///   C(o,i) = alpha op(A(o,i)) op(B(o,i)) + beta C(o,i)
/// with the operands' rows/cols those of A, B, C as stored (op applied
/// after); beta = 0 writes C without reading it. C's matrices must not
/// overlap each other or A, B. Throws std::invalid_argument when the
/// extents do not match. Matrix (o, i)'s result depends only on its own
/// operands (not on outer or inner).
template <class T>
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc);

}  // namespace gpipe::kernels

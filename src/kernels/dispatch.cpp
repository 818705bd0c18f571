// Public entry points of the kernel seam's GEMM and attention primitives:
// argument checks, then the implementation backend.cpp picks.
#include <fmt/format.h>

#include <stdexcept>

#include "gpipe/config.hpp"
#include "implementations.hpp"

namespace gpipe::kernels {

namespace {

void require(bool ok, const char* what, const std::string& detail) {
  if (!ok) throw std::invalid_argument(fmt::format("gpipe::kernels::{}: {}", what, detail));
}

template <class V>
std::string dims(const V& v) {
  return fmt::format("({}, {})", v.extent(0), v.extent(1));
}

// Whether the oneDNN implementation runs `p` at T.
template <class T>
bool onednn_runs(Primitive p) {
#ifdef GPIPE_ENABLE_ONEDNN
  return std::is_same_v<T, float> && implementation(p, int(sizeof(T))) == Implementation::onednn;
#else
  (void)p;
  return false;
#endif
}

#ifdef GPIPE_ENABLE_CUBLAS
// Whether the cuBLAS implementation runs `p` at T.
template <class T>
bool cublas_runs(Primitive p) {
  return implementation(p, int(sizeof(T))) == Implementation::cublas;
}
#endif

// A Kokkos Tools region around each primitive, so profiles and the
// profiling test see vendor calls (which launch no Kokkos kernel) by name.
struct Region {
  explicit Region(const char* name) { Kokkos::Profiling::pushRegion(name); }
  ~Region() { Kokkos::Profiling::popRegion(); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
};

std::int64_t rows_of(Op o, const Strided& s) { return o == Op::none ? s.rows : s.cols; }
std::int64_t cols_of(Op o, const Strided& s) { return o == Op::none ? s.cols : s.rows; }

}  // namespace

template <class T>
void gemm(const ExecSpace& space, Op ta, Op tb, T alpha, ConstMatrix<T> a, ConstMatrix<T> b, T beta,
          Matrix<T> c) {
  const auto m = ta == Op::none ? a.extent(0) : a.extent(1), ka = ta == Op::none ? a.extent(1) : a.extent(0);
  const auto kb = tb == Op::none ? b.extent(0) : b.extent(1), n = tb == Op::none ? b.extent(1) : b.extent(0);
  require(ka == kb && c.extent(0) == m && c.extent(1) == n, "gemm",
          fmt::format("op(A) {}x{}, op(B) {}x{}, C {}", m, ka, kb, n, dims(c)));
  const Region region("gpipe::kernels::gemm");
  if constexpr (std::is_same_v<T, float>) {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<T>(Primitive::gemm)) return onednn::gemm(space, ta, tb, alpha, a, b, beta, c);
#endif
  }
#ifdef GPIPE_ENABLE_CUBLAS
  if (cublas_runs<T>(Primitive::gemm)) return cublas::gemm<T>(space, ta, tb, alpha, a, b, beta, c);
#endif
  portable::gemm<T>(space, ta, tb, alpha, a, b, beta, c);
}

template <class T>
void gemm_bias(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias, Matrix<T> y) {
  require(x.extent(1) == w.extent(0) && bias.extent(0) == 1 && bias.extent(1) == w.extent(1) &&
              y.extent(0) == x.extent(0) && y.extent(1) == w.extent(1),
          "gemm_bias", fmt::format("X {}, W {}, bias {}, Y {}", dims(x), dims(w), dims(bias), dims(y)));
  const Region region("gpipe::kernels::gemm_bias");
  if constexpr (std::is_same_v<T, float>) {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<T>(Primitive::gemm_bias)) return onednn::gemm_bias(space, x, w, bias, y);
#endif
  }
#ifdef GPIPE_ENABLE_CUBLAS
  if (cublas_runs<T>(Primitive::gemm_bias)) return cublas::gemm_bias<T>(space, x, w, bias, y);
#endif
  portable::gemm_bias<T>(space, x, w, bias, y);
}

template <class T>
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc) {
  require(outer >= 0 && inner >= 0 && cols_of(ta, sa) == rows_of(tb, sb) && sc.rows == rows_of(ta, sa) &&
              sc.cols == cols_of(tb, sb) && sa.ld >= sa.cols && sb.ld >= sb.cols && sc.ld >= sc.cols,
          "batched_gemm",
          fmt::format("op(A) {}x{}, op(B) {}x{}, C {}x{} (ld {}, {}, {})", rows_of(ta, sa), cols_of(ta, sa),
                      rows_of(tb, sb), cols_of(tb, sb), sc.rows, sc.cols, sa.ld, sb.ld, sc.ld));
  if (outer * inner == 0) return;
  const Region region("gpipe::kernels::batched_gemm");
  if constexpr (std::is_same_v<T, float>) {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<T>(Primitive::batched_gemm))
      return onednn::batched_gemm(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
#endif
  }
#ifdef GPIPE_ENABLE_CUBLAS
  if (cublas_runs<T>(Primitive::batched_gemm))
    return cublas::batched_gemm<T>(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
#endif
  portable::batched_gemm<T>(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
}

namespace {
template <class T>
void check_attention(const AttentionShape& s, const ConstMatrix<T>& qkv, std::size_t probs_rows,
                     std::size_t probs_cols, std::size_t out_rows, std::size_t out_cols) {
  const std::size_t N = std::size_t(s.samples * s.tokens), d = std::size_t(s.heads * s.head_width);
  const std::size_t P = std::size_t(s.samples * s.heads * s.tokens), T_ = std::size_t(s.tokens);
  require(s.samples >= 0 && s.tokens > 0 && s.heads > 0 && s.head_width > 0 && qkv.extent(0) == N &&
              qkv.extent(1) == 3 * d && probs_rows == P && probs_cols == T_ && out_rows == N && out_cols == d,
          "attention",
          fmt::format("n {} T {} H {} dh {}: qkv {} (expected ({}, {})), probs ({}, {}) (expected ({}, {})), "
                      "output ({}, {}) (expected ({}, {}))",
                      s.samples, s.tokens, s.heads, s.head_width, dims(qkv), N, 3 * d, probs_rows, probs_cols, P,
                      T_, out_rows, out_cols, N, d));
}
}  // namespace

template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv, Matrix<T> probs,
                       Matrix<T> out) {
  check_attention<T>(shape, qkv, probs.extent(0), probs.extent(1), out.extent(0), out.extent(1));
  if (shape.samples == 0) return;
  const Region region("gpipe::kernels::attention_forward");
  if constexpr (std::is_same_v<T, float>) {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<T>(Primitive::attention)) return onednn::attention_forward(space, shape, qkv, probs, out);
#endif
  }
  portable::attention_forward<T>(space, shape, qkv, probs, out);
}

template <class T>
void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<T> qkv,
                        ConstMatrix<T> probs, ConstMatrix<T> d_out, Matrix<T> work, Matrix<T> d_qkv) {
  check_attention<T>(shape, qkv, probs.extent(0), probs.extent(1), d_out.extent(0), d_out.extent(1));
  require(work.extent(0) == probs.extent(0) && work.extent(1) == probs.extent(1) &&
              d_qkv.extent(0) == qkv.extent(0) && d_qkv.extent(1) == qkv.extent(1),
          "attention_backward", fmt::format("work {} (expected {}), d_qkv {} (expected {})", dims(work),
                                            dims(probs), dims(d_qkv), dims(qkv)));
  if (shape.samples == 0) return;
  const Region region("gpipe::kernels::attention_backward");
  if constexpr (std::is_same_v<T, float>) {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<T>(Primitive::attention))
      return onednn::attention_backward(space, shape, qkv, probs, d_out, work, d_qkv);
#endif
  }
  portable::attention_backward<T>(space, shape, qkv, probs, d_out, work, d_qkv);
}

#define GPIPE_INSTANTIATE(T)                                                                                  \
  template void gemm<T>(const ExecSpace&, Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>);          \
  template void gemm_bias<T>(const ExecSpace&, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, Matrix<T>);  \
  template void batched_gemm<T>(const ExecSpace&, Op, Op, std::int64_t, std::int64_t, T, const T*,           \
                                const Strided&, const T*, const Strided&, T, T*, const Strided&);            \
  template void attention_forward<T>(const ExecSpace&, const AttentionShape&, ConstMatrix<T>, Matrix<T>,     \
                                     Matrix<T>);                                                             \
  template void attention_backward<T>(const ExecSpace&, const AttentionShape&, ConstMatrix<T>, ConstMatrix<T>, \
                                      ConstMatrix<T>, Matrix<T>, Matrix<T>);
GPIPE_INSTANTIATE(float)
GPIPE_INSTANTIATE(double)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels

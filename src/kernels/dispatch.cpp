// Public entry points of the kernel seam's GEMM and attention primitives:
// argument checks, then the implementation backend.cpp picks.
#include <fmt/format.h>

#include <stdexcept>

#include "attention_common.hpp"
#include "gpipe/config.hpp"
#include "implementations.hpp"
#include "reduced.hpp"

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

// The elements a strided-batched operand addresses, from its base: the
// last matrix's last element + 1 (0 for an empty batch).
std::int64_t footprint(std::int64_t outer, std::int64_t inner, const Strided& s) {
  if (outer == 0 || inner == 0 || s.rows == 0 || s.cols == 0) return 0;
  return (outer - 1) * s.outer_stride + (inner - 1) * s.inner_stride + (s.rows - 1) * s.ld + s.cols;
}

// Whether bf16 operands go to oneDNN's bf16 primitive for `p`.
bool onednn_bf16(Format f, Primitive p) {
#ifdef GPIPE_ENABLE_ONEDNN
  return f == Format::bf16 && implementation(p, 2) == Implementation::onednn;
#else
  (void)f;
  (void)p;
  return false;
#endif
}

// The copies an OperandReuse scope holds (gemm.hpp), each in a slot of its
// own (reduced::held ..), the least recently used one replaced when all are
// taken, so a copy read by a GEMM is never overwritten by that GEMM's other
// operand. One host thread calls the seam.
struct Reused {
  const float* p = nullptr;  // null: the slot is free
  std::int64_t n = 0;
  const bf16* copy = nullptr;
  std::uint64_t used = 0;
};
struct ReuseScope {
  int depth = 0;
  std::uint64_t tick = 0;
  Reused held[reduced::kHeld];
  void clear() {
    for (Reused& h : held) h = Reused{};
  }
};
ReuseScope& reuse_scope() {
  static ReuseScope s;
  return s;
}
// [p, p + n) is about to be written by a GEMM: its held copies are stale.
void reuse_written(const float* p, std::int64_t n) {
  for (Reused& h : reuse_scope().held)
    if (h.p && p < h.p + h.n && h.p < p + n) h = Reused{};
}

const bf16* converted(const ExecSpace& space, const float* v, std::int64_t n, int slot) {
  if (const bf16* copy = reduced::weight_copy(v, n)) return copy;  // a weight: converted once per step
  ReuseScope& r = reuse_scope();
  if (r.depth == 0) {
    bf16* out = reduced::scratch16(slot, n);
    reduced::to_bf16(space, v, n, out);
    return out;
  }
  int victim = 0;
  for (int i = 0; i < reduced::kHeld; ++i) {
    Reused& h = r.held[i];
    if (h.p && v >= h.p && v + n <= h.p + h.n) {  // inside a held copy
      h.used = ++r.tick;
      return h.copy + (v - h.p);
    }
    if (r.held[i].used < r.held[victim].used) victim = i;  // free slots have used 0
  }
  bf16* out = reduced::scratch16(reduced::held + victim, n);
  reduced::to_bf16(space, v, n, out);
  r.held[victim] = Reused{v, n, out, ++r.tick};
  return out;
}

}  // namespace

// The float primitives on operands already rounded (or at fp32).
namespace {
void gemm_f32(const ExecSpace& space, Op ta, Op tb, float alpha, ConstMatrix<float> a, ConstMatrix<float> b,
              float beta, Matrix<float> c) {
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_runs<float>(Primitive::gemm)) return onednn::gemm(space, ta, tb, alpha, a, b, beta, c);
#endif
  portable::gemm<float>(space, ta, tb, alpha, a, b, beta, c);
}

void gemm_bias_f32(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstMatrix<float> bias,
                   Matrix<float> y) {
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_runs<float>(Primitive::gemm_bias)) return onednn::gemm_bias(space, x, w, bias, y);
#endif
  portable::gemm_bias<float>(space, x, w, bias, y);
}

void batched_f32(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                 const float* a, const Strided& sa, const float* b, const Strided& sb, float beta, float* c,
                 const Strided& sc) {
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_runs<float>(Primitive::batched_gemm))
    return onednn::batched_gemm(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
#endif
  portable::batched_gemm<float>(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
}

// Reduced compute format (bf16 / fp16): operands rounded, fp32 accumulation.
void gemm_reduced(const ExecSpace& space, Format f, Op ta, Op tb, float alpha, ConstMatrix<float> a,
                  ConstMatrix<float> b, float beta, Matrix<float> c) {
  const std::int64_t k = std::int64_t(ta == Op::none ? a.extent(1) : a.extent(0));
  if (c.extent(0) == 0 || c.extent(1) == 0) return;
  if (k == 0) return gemm_f32(space, ta, tb, alpha, a, b, beta, c);  // C = beta C
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_bf16(f, Primitive::gemm)) {
    reuse_written(c.data(), std::int64_t(c.span()));
    return onednn::gemm_bf16(space, ta, tb, alpha, converted(space, a.data(), std::int64_t(a.span()), reduced::a),
                             std::int64_t(a.extent(0)), std::int64_t(a.extent(1)),
                             converted(space, b.data(), std::int64_t(b.span()), reduced::b),
                             std::int64_t(b.extent(0)), std::int64_t(b.extent(1)), beta, c);
  }
#endif
  gemm_f32(space, ta, tb, alpha, reduced::rounded(space, f, a, reduced::a), reduced::rounded(space, f, b, reduced::b),
           beta, c);
}

void gemm_bias_reduced(const ExecSpace& space, Format f, ConstMatrix<float> x, ConstMatrix<float> w,
                       ConstMatrix<float> bias, Matrix<float> y) {
  if (y.extent(0) == 0) return;
  if (x.extent(1) == 0) return gemm_bias_f32(space, x, w, bias, y);
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_bf16(f, Primitive::gemm_bias)) {
    reuse_written(y.data(), std::int64_t(y.span()));
    return onednn::gemm_bias_bf16(space, converted(space, x.data(), std::int64_t(x.span()), reduced::a),
                                  std::int64_t(x.extent(0)), std::int64_t(x.extent(1)),
                                  converted(space, w.data(), std::int64_t(w.span()), reduced::b),
                                  std::int64_t(w.extent(1)), bias, y);
  }
#endif
  gemm_bias_f32(space, reduced::rounded(space, f, x, reduced::a), reduced::rounded(space, f, w, reduced::b), bias, y);
}

// a_rounded / b_rounded: that operand already holds values of the format
// (attention's operands rounded once per call, below): used as it is.
void batched_reduced(const ExecSpace& space, Format f, Op ta, Op tb, std::int64_t outer, std::int64_t inner,
                     float alpha, const float* a, const Strided& sa, const float* b, const Strided& sb, float beta,
                     float* c, const Strided& sc, bool a_rounded = false, bool b_rounded = false) {
  if (sc.rows == 0 || sc.cols == 0) return;
  if ((ta == Op::none ? sa.cols : sa.rows) == 0)
    return batched_f32(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  const std::int64_t na = footprint(outer, inner, sa), nb = footprint(outer, inner, sb);
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_bf16(f, Primitive::batched_gemm)) {
    reuse_written(c, footprint(outer, inner, sc));
    return onednn::batched_gemm_bf16(space, ta, tb, outer, inner, alpha, converted(space, a, na, reduced::a), sa,
                                     converted(space, b, nb, reduced::b), sb, beta, c, sc);
  }
#endif
  const float* ra = a;
  const float* rb = b;
  if (!a_rounded) {
    float* r = reduced::scratch(reduced::a, na);
    reduced::round(space, f, a, na, r);
    ra = r;
  }
  if (!b_rounded) {
    float* r = reduced::scratch(reduced::b, nb);
    reduced::round(space, f, b, nb, r);
    rb = r;
  }
  batched_f32(space, ta, tb, outer, inner, alpha, ra, sa, rb, sb, beta, c, sc);
}

// Attention's batched GEMMs through the public entry point (reduced there).
// On the rounded route the attention rounds qkv (and d_out) once per call
// into slots x (and dy), not once per GEMM operand: Q, K and V are strided
// views of one qkv matrix, so each operand's footprint spans nearly all of
// it (3 roundings of qkv per forward, 3 more and 2 of d_out per backward).
// An operand inside such a range is used as it is (rounding is idempotent:
// bitwise the per-operand rounding).
struct SeamBatched {
  const float* rounded[2] = {nullptr, nullptr};
  std::int64_t rounded_n[2] = {0, 0};
  bool inside(const float* p, std::int64_t n) const {
    for (int i = 0; i < 2; ++i)
      if (rounded[i] && p >= rounded[i] && p + n <= rounded[i] + rounded_n[i]) return true;
    return false;
  }
  void operator()(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                  const float* a, const Strided& sa, const float* b, const Strided& sb, float beta, float* c,
                  const Strided& sc) const {
    batched_reduced(space, compute_format(), ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc,
                    inside(a, footprint(outer, inner, sa)), inside(b, footprint(outer, inner, sb)));
  }
};

// The rounded route for the attention's batched GEMMs (not oneDNN's bf16 ones).
bool attention_rounds_once(Format f) { return !onednn_bf16(f, Primitive::batched_gemm); }

// The attention's softmax under a reduced compute format: fp32, on the
// implementation the float attention runs (oneDNN's vectorized softmax
// where implementation(attention, 4) is oneDNN, else the Kokkos one), in place.
struct SeamSoftmax {
  void forward(const ExecSpace& space, float* probs, std::int64_t rows, std::int64_t tokens, bool causal) const {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<float>(Primitive::attention)) return onednn::softmax_forward(space, probs, rows, tokens, causal);
#endif
    detail::masked_softmax<float>(space, probs, rows, tokens, causal);
  }
  void backward(const ExecSpace& space, const float* probs, float* dprobs, std::int64_t rows, std::int64_t tokens,
                bool causal) const {
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<float>(Primitive::attention))
      return onednn::softmax_backward(space, probs, dprobs, rows, tokens, causal);
#endif
    detail::softmax_backward<float>(space, probs, dprobs, rows, tokens, causal);
  }
};

#ifdef GPIPE_ENABLE_ONEDNN
// The attention on the native bf16 route. oneDNN 2.6's batched matmul runs
// its `gemm:jit` implementation, 0.7-3 ms a call at the ViT's 128 samples x
// 4 heads of 16 x 16, whenever an operand is a head of the interleaved qkv
// layout (a strided (T, dh) block of a (n T, 3d) matrix), a source is
// transposed, or the destination's rows are 3d apart; on head-major
// operands and destinations (each (sample, head) a dense block) it runs
// brgemm (AMX here) at 0.04-0.2 ms (perf/README.md, "Issue 22: the ViT's
// bf16 step on AMX"). The bf16 conversion is a copy anyway, so it writes
// the layouts brgemm takes: qkv -> [Q | K | V] each (n, H, T, dh), d_out ->
// (n, H, T, dh), P and dS as stored and transposed ((n H T, T) blocks of
// P^T, dS^T), one pass each (before: converted once per GEMM operand, qkv 4
// times a forward and 6 times a backward); the results go to head-major
// fp32 buffers and one pass scatters them into the interleaved out /
// d_qkv. The GEMMs' bf16 operands hold the same values (round to nearest
// even); only oneDNN's summation order may differ from the interleaved
// route's (test: ReducedPrecision.AttentionIsItsGemmsThroughTheSeam).
kernels::Strided head_major(const detail::AttentionLayout& L) {
  return kernels::Strided{L.T, L.dh, L.dh, L.H * L.T * L.dh, L.T * L.dh};
}

// The interleaved element strides of `parts` (T, d) blocks of src (n T, ld)
// and the head-major ones [part][sample][head][token][0..dh), over the dims
// (part, sample, head, token, column).
std::vector<std::int64_t> head_dims(const detail::AttentionLayout& L, std::int64_t parts) {
  return {parts, L.n, L.H, L.T, L.dh};
}
std::vector<std::int64_t> interleaved_strides(const detail::AttentionLayout& L, std::int64_t ld) {
  return {L.d, L.T * ld, L.dh, ld, 1};
}
std::vector<std::int64_t> head_major_strides(const detail::AttentionLayout& L) {
  return {L.n * L.H * L.T * L.dh, L.H * L.T * L.dh, L.T * L.dh, L.dh, 1};
}

// `parts` (T, d) blocks of each sample's rows of src (n T, ld) ->
// dst[part][sample][head][token][0..dh) in bf16: one oneDNN reorder
// (convert.hpp's rounding; the ViT's to_heads went from 1.4 to 0.68 ms a
// step against the Kokkos loop it replaced, perf/README.md "Issue 22:
// conversions through oneDNN, and fewer of them").
void to_heads(const ExecSpace& space, const detail::AttentionLayout& L, const float* src, std::int64_t ld,
              std::int64_t parts, bf16* dst) {
  onednn::strided_to_bf16(space, src, head_dims(L, parts), interleaved_strides(L, ld), dst, head_major_strides(L));
}

// The head-major fp32 results [part][sample][head][token][0..dh) -> their
// columns part d + h dh .. of dst (n T, ld). A Kokkos loop: oneDNN's
// reorder of the same permutation (fp32 -> fp32, rows of dh = 16 values)
// took twice its time on the ViT.
void from_heads(const ExecSpace& space, const detail::AttentionLayout& L, const float* src, std::int64_t parts,
                float* dst, std::int64_t ld) {
  const std::int64_t n = L.n, H = L.H, T = L.T, dh = L.dh, d = L.d;
  Kokkos::parallel_for(
      "gpipe::kernels::attention::from_heads", Kokkos::RangePolicy<ExecSpace>(space, 0, n * T),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t i = r / T, t = r % T;
        for (std::int64_t part = 0; part < parts; ++part)
          for (std::int64_t h = 0; h < H; ++h) {
            const float* from = src + (((part * n + i) * H + h) * T + t) * dh;
            float* to = dst + r * ld + part * d + h * dh;
            for (std::int64_t c = 0; c < dh; ++c) to[c] = from[c];
          }
      });
}

// Each (T, T) block of src (blocks x T x T) transposed, in bf16: dst[b][j][i]
// = bf16(src[b][i][j]), one oneDNN reorder.
void to_bf16_transposed(const ExecSpace& space, const float* src, std::int64_t blocks, std::int64_t T, bf16* dst) {
  onednn::strided_to_bf16(space, src, {blocks, T, T}, {T * T, 1, T}, dst, {T * T, T, 1});
}

void native_attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                              Matrix<float> probs, Matrix<float> out) {
  const detail::AttentionLayout L(shape);
  reuse_written(out.data(), std::int64_t(out.span()));
  reuse_written(probs.data(), std::int64_t(probs.span()));
  const float scale = 1.0f / float(std::sqrt(double(L.dh)));
  const std::int64_t Nd = L.n * L.T * L.d;
  bf16* heads = reduced::scratch16(reduced::x, 3 * Nd);
  to_heads(space, L, qkv.data(), 3 * L.d, 3, heads);
  const Strided hm = head_major(L);
  onednn::batched_gemm_bf16(space, Op::none, Op::transpose, L.n, L.H, scale, heads, hm, heads + Nd, hm, 0.0f,
                            probs.data(), L.probs);
  SeamSoftmax{}.forward(space, probs.data(), L.n * L.H * L.T, L.T, shape.causal);
  const bf16* p = converted(space, probs.data(), std::int64_t(probs.span()), reduced::a);
  float* o = reduced::scratch(reduced::x, Nd);
  onednn::batched_gemm_bf16(space, Op::none, Op::none, L.n, L.H, 1.0f, p, L.probs, heads + 2 * Nd, hm, 0.0f, o, hm);
  from_heads(space, L, o, 1, out.data(), L.d);
}

void native_attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                               ConstMatrix<float> probs, ConstMatrix<float> d_out, Matrix<float> work,
                               Matrix<float> d_qkv) {
  const detail::AttentionLayout L(shape);
  const float scale = 1.0f / float(std::sqrt(double(L.dh)));
  reuse_written(d_qkv.data(), std::int64_t(d_qkv.span()));
  reuse_written(work.data(), std::int64_t(work.span()));
  const std::int64_t Nd = L.n * L.T * L.d, blocks = L.n * L.H, PT = std::int64_t(probs.span());
  bf16* heads = reduced::scratch16(reduced::x, 3 * Nd);
  to_heads(space, L, qkv.data(), 3 * L.d, 3, heads);
  bf16* dout = reduced::scratch16(reduced::dy, Nd);
  to_heads(space, L, d_out.data(), L.d, 1, dout);
  const Strided hm = head_major(L);
  const bf16 *qh = heads, *kh = heads + Nd, *vh = heads + 2 * Nd;
  float* grads = reduced::scratch(reduced::x, 3 * Nd);  // head-major dQ, dK, dV
  float* ds = work.data();
  bf16* pt = reduced::scratch16(reduced::a, PT);
  to_bf16_transposed(space, probs.data(), blocks, L.T, pt);
  onednn::batched_gemm_bf16(space, Op::none, Op::none, L.n, L.H, 1.0f, pt, L.probs, dout, hm, 0.0f, grads + 2 * Nd, hm);
  onednn::batched_gemm_bf16(space, Op::none, Op::transpose, L.n, L.H, 1.0f, dout, hm, vh, hm, 0.0f, ds, L.probs);
  SeamSoftmax{}.backward(space, probs.data(), ds, L.n * L.H * L.T, L.T, shape.causal);
  bf16* d16 = reduced::scratch16(reduced::b, PT);
  reduced::to_bf16(space, ds, PT, d16);
  bf16* d16t = reduced::scratch16(reduced::a, PT);  // P^T is consumed
  to_bf16_transposed(space, ds, blocks, L.T, d16t);
  onednn::batched_gemm_bf16(space, Op::none, Op::none, L.n, L.H, scale, d16, L.probs, kh, hm, 0.0f, grads, hm);
  onednn::batched_gemm_bf16(space, Op::none, Op::none, L.n, L.H, scale, d16t, L.probs, qh, hm, 0.0f, grads + Nd, hm);
  from_heads(space, L, grads, 3, d_qkv.data(), 3 * L.d);
}
#endif
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
    if (const Format f = compute_format(); reduced::active(f)) return gemm_reduced(space, f, ta, tb, alpha, a, b, beta, c);
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
    if (const Format f = compute_format(); reduced::active(f)) return gemm_bias_reduced(space, f, x, w, bias, y);
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
    if (const Format f = compute_format(); reduced::active(f))
      return batched_reduced(space, f, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
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
    if (const Format f = compute_format(); reduced::active(f)) {
#ifdef GPIPE_ENABLE_ONEDNN
      if (!attention_rounds_once(f)) return native_attention_forward(space, shape, qkv, probs, out);
#endif
      const ConstMatrix<float> q = reduced::rounded(space, f, qkv, reduced::x);
      SeamBatched batched;
      batched.rounded[0] = q.data(), batched.rounded_n[0] = std::int64_t(q.span());
      return detail::attention_forward<float>(space, shape, q, probs, out, batched, SeamSoftmax{});
    }
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
    if (const Format f = compute_format(); reduced::active(f)) {
#ifdef GPIPE_ENABLE_ONEDNN
      if (!attention_rounds_once(f)) return native_attention_backward(space, shape, qkv, probs, d_out, work, d_qkv);
#endif
      const ConstMatrix<float> q = reduced::rounded(space, f, qkv, reduced::x);
      const ConstMatrix<float> d = reduced::rounded(space, f, d_out, reduced::dy);
      SeamBatched batched;
      batched.rounded[0] = q.data(), batched.rounded_n[0] = std::int64_t(q.span());
      batched.rounded[1] = d.data(), batched.rounded_n[1] = std::int64_t(d.span());
      return detail::attention_backward<float>(space, shape, q, probs, d, work, d_qkv, batched, SeamSoftmax{});
    }
#ifdef GPIPE_ENABLE_ONEDNN
    if (onednn_runs<T>(Primitive::attention))
      return onednn::attention_backward(space, shape, qkv, probs, d_out, work, d_qkv);
#endif
  }
  portable::attention_backward<T>(space, shape, qkv, probs, d_out, work, d_qkv);
}

// Parameter operands (gemm.hpp): prepacked in a FrozenWeights scope on the
// oneDNN float path without a reduced compute format, and on oneDNN's bf16
// path where W lies in the registered bf16 weight copy; everywhere else the
// plain gemm_bias / gemm.
namespace {
std::uint64_t frozen_scope = 0, frozen_depth = 0, frozen_count = 0;
const void* frozen_begin = nullptr;  // the outermost scope's weight range (pack_next)
const void* frozen_end = nullptr;
}  // namespace

OperandReuse::OperandReuse() { ++reuse_scope().depth; }
OperandReuse::~OperandReuse() {
  ReuseScope& r = reuse_scope();
  if (--r.depth == 0) r.clear();
}

FrozenWeights::FrozenWeights() {
  if (frozen_depth++ == 0) frozen_scope = ++frozen_count;
}
FrozenWeights::FrozenWeights(const void* weights, std::int64_t bytes) : FrozenWeights() {
  if (frozen_depth == 1 && weights != nullptr && bytes > 0) {
    frozen_begin = weights;
    frozen_end = static_cast<const char*>(weights) + bytes;
  }
}
FrozenWeights::~FrozenWeights() {
  if (--frozen_depth != 0) return;
#ifdef GPIPE_ENABLE_ONEDNN
  onednn::drop_unused_packs(frozen_scope);
#endif
  frozen_scope = 0;
  frozen_begin = frozen_end = nullptr;
}
bool FrozenWeights::pack_next() {
#ifdef GPIPE_ENABLE_ONEDNN
  if (frozen_scope != 0 && frozen_begin != nullptr) return onednn::pack_next(frozen_scope, frozen_begin, frozen_end);
#endif
  return false;
}
std::uint64_t FrozenWeights::current() { return frozen_scope; }
std::int64_t FrozenWeights::packed_bytes() {
#ifdef GPIPE_ENABLE_ONEDNN
  return onednn::packed_bytes();
#else
  return 0;
#endif
}

template <class T>
void gemm_bias_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias, Matrix<T> y) {
#ifdef GPIPE_ENABLE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    // bf16 in a scope, W inside the registered weight copy's range: W
    // converted and packed once per scope (gemm_onednn.cpp,
    // gemm_bias_weights_bf16), the copy itself not read.
    if (const Format f = compute_format();
        frozen_scope != 0 && onednn_bf16(f, Primitive::gemm_bias) && x.extent(0) > 0 && x.extent(1) > 0) {
      if (reduced::in_weight_copy(w.data(), std::int64_t(w.span()))) {
        require(x.extent(1) == w.extent(0) && bias.extent(0) == 1 && bias.extent(1) == w.extent(1) &&
                    y.extent(0) == x.extent(0) && y.extent(1) == w.extent(1),
                "gemm_bias", fmt::format("X {}, W {}, bias {}, Y {}", dims(x), dims(w), dims(bias), dims(y)));
        const Region region("gpipe::kernels::gemm_bias");
        return onednn::gemm_bias_weights_bf16(space, converted(space, x.data(), std::int64_t(x.span()), reduced::a),
                                              std::int64_t(x.extent(0)), std::int64_t(x.extent(1)), w.data(),
                                              std::int64_t(w.extent(1)), bias, y, frozen_scope);
      }
    }
    if (frozen_scope != 0 && !reduced::active(compute_format()) && onednn_runs<T>(Primitive::gemm_bias)) {
      require(x.extent(1) == w.extent(0) && bias.extent(0) == 1 && bias.extent(1) == w.extent(1) &&
                  y.extent(0) == x.extent(0) && y.extent(1) == w.extent(1),
              "gemm_bias", fmt::format("X {}, W {}, bias {}, Y {}", dims(x), dims(w), dims(bias), dims(y)));
      const Region region("gpipe::kernels::gemm_bias");
      return onednn::gemm_bias_weights(space, x, w, bias, y, frozen_scope);
    }
  }
#endif
  gemm_bias<T>(space, x, w, bias, y);
}

template <class T>
void gemm_weights(const ExecSpace& space, Op ta, Op tw, T alpha, ConstMatrix<T> a, ConstMatrix<T> w, T beta,
                  Matrix<T> c) {
#ifdef GPIPE_ENABLE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    // W transposed (a Dense layer's dX = dY W^T): the plain bf16 weight copy
    // (the gemm below), not a pack: packing that form costs about what the
    // products on the packed copy save (perf/README.md, "Issue 22:
    // conversions through oneDNN").
    if (const Format f = compute_format(); frozen_scope != 0 && onednn_bf16(f, Primitive::gemm) && tw == Op::none) {
      const auto m = ta == Op::none ? a.extent(0) : a.extent(1), ka = ta == Op::none ? a.extent(1) : a.extent(0);
      const auto kb = tw == Op::none ? w.extent(0) : w.extent(1), n = tw == Op::none ? w.extent(1) : w.extent(0);
      if (m > 0 && n > 0 && ka > 0 && reduced::in_weight_copy(w.data(), std::int64_t(w.span()))) {
        require(ka == kb && c.extent(0) == m && c.extent(1) == n, "gemm",
                fmt::format("op(A) {}x{}, op(B) {}x{}, C {}", m, ka, kb, n, dims(c)));
        const Region region("gpipe::kernels::gemm");
        return onednn::gemm_weights_bf16(space, ta, tw, alpha,
                                         converted(space, a.data(), std::int64_t(a.span()), reduced::a),
                                         std::int64_t(a.extent(0)), std::int64_t(a.extent(1)), w.data(),
                                         std::int64_t(w.extent(0)), std::int64_t(w.extent(1)), beta, c, frozen_scope);
      }
    }
    if (frozen_scope != 0 && !reduced::active(compute_format()) && onednn_runs<T>(Primitive::gemm)) {
      const auto m = ta == Op::none ? a.extent(0) : a.extent(1), ka = ta == Op::none ? a.extent(1) : a.extent(0);
      const auto kb = tw == Op::none ? w.extent(0) : w.extent(1), n = tw == Op::none ? w.extent(1) : w.extent(0);
      require(ka == kb && c.extent(0) == m && c.extent(1) == n, "gemm",
              fmt::format("op(A) {}x{}, op(B) {}x{}, C {}", m, ka, kb, n, dims(c)));
      const Region region("gpipe::kernels::gemm");
      return onednn::gemm_weights(space, ta, tw, alpha, a, w, beta, c, frozen_scope);
    }
  }
#endif
  gemm<T>(space, ta, tw, alpha, a, w, beta, c);
}

#define GPIPE_INSTANTIATE(T)                                                                                  \
  template void gemm<T>(const ExecSpace&, Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>);          \
  template void gemm_bias<T>(const ExecSpace&, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, Matrix<T>);  \
  template void gemm_bias_weights<T>(const ExecSpace&, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>,       \
                                     Matrix<T>);                                                             \
  template void gemm_weights<T>(const ExecSpace&, Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>);  \
  template void batched_gemm<T>(const ExecSpace&, Op, Op, std::int64_t, std::int64_t, T, const T*,           \
                                const Strided&, const T*, const Strided&, T, T*, const Strided&);            \
  template void attention_forward<T>(const ExecSpace&, const AttentionShape&, ConstMatrix<T>, Matrix<T>,     \
                                     Matrix<T>);                                                             \
  template void attention_backward<T>(const ExecSpace&, const AttentionShape&, ConstMatrix<T>, ConstMatrix<T>, \
                                      ConstMatrix<T>, Matrix<T>, Matrix<T>);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels

// oneDNN GEMM implementation of the kernel seam (float): matmul primitives,
// cached by shape (onednn_common.hpp). Row-major operands are passed as
// plain memory descriptors with explicit strides, a transposed operand as
// the same memory with swapped strides (no copy). alpha is the primitive's
// output scale, beta a sum post-op (absent for beta = 0, so C is written
// without being read), the bias of gemm_bias matmul's bias argument. Every
// matmul takes its scratchpad from the caller (user scratchpad mode,
// onednn_common.hpp), so an execution allocates nothing.
#include <oneapi/dnnl/dnnl_version.h>

#include <cstring>
#include <map>
#include <tuple>
#include <stdexcept>

#include <fmt/format.h>

#include "implementations.hpp"
#include "onednn_common.hpp"
#include "reduced.hpp"

namespace gpipe::kernels::onednn {

using dnnl::memory;
using namespace detail;

namespace {

using dims = memory::dims;
constexpr auto f32 = memory::data_type::f32;
constexpr auto bf16_t = memory::data_type::bf16;

Cache& cache() {
  static Cache c;
  return c;
}

// Strided-batched operand as stored -> its op() descriptor (outer, inner, r, c).
memory::desc batched_desc(Op o, std::int64_t outer, std::int64_t inner, const Strided& s,
                          memory::data_type t = f32) {
  if (o == Op::none) return memory::desc(dims{outer, inner, s.rows, s.cols}, t,
                                         dims{s.outer_stride, s.inner_stride, s.ld, 1});
  return memory::desc(dims{outer, inner, s.cols, s.rows}, t, dims{s.outer_stride, s.inner_stride, 1, s.ld});
}

dnnl::primitive_attr attributes(float alpha, float beta) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return attr;
}

std::int64_t bits(float f) {
  std::int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}

Entry make_matmul(const memory::desc& a, const memory::desc& b, const memory::desc* bias, const memory::desc& c,
                  float alpha, float beta) {
  const auto desc = bias ? dnnl::matmul::desc(a, b, *bias, c) : dnnl::matmul::desc(a, b, c);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(desc, user_scratchpad(attributes(alpha, beta)), engine());
  } catch (const dnnl::error& e) {
    if (a.data_type() != bf16_t) throw;
    throw std::runtime_error(fmt::format(
        "gpipe::kernels: oneDNN {} has no bf16 matmul on this CPU ({}); run with kernels: portable "
        "(GPIPE_KERNELS=portable) or GPIPE_BF16_ROUTE=rounded to round the operands to bf16 in fp32 kernels instead",
        version(), e.what()));
  }
  Entry e;
  e.primitive = dnnl::matmul(pd);
  e.args = {{DNNL_ARG_SRC, unbound(a)}, {DNNL_ARG_WEIGHTS, unbound(b)}, {DNNL_ARG_DST, unbound(c)}};
  if (bias) e.args.emplace(DNNL_ARG_BIAS, unbound(*bias));
  e.use_scratchpad(pd.scratchpad_desc());
  return e;
}

}  // namespace

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

void gemm(const ExecSpace& space, Op ta, Op tb, float alpha, ConstMatrix<float> a, ConstMatrix<float> b,
          float beta, Matrix<float> c) {
  const std::int64_t ar = std::int64_t(a.extent(0)), ac = std::int64_t(a.extent(1));
  const std::int64_t br = std::int64_t(b.extent(0)), bc = std::int64_t(b.extent(1));
  const std::int64_t m = std::int64_t(c.extent(0)), n = std::int64_t(c.extent(1));
  if (m == 0 || n == 0) return;
  const std::int64_t k = ta == Op::none ? ac : ar;
  if (k == 0) {  // C = beta C, as BLAS does
    portable::gemm<float>(space, ta, tb, alpha, a, b, beta, c);
    return;
  }
  space.fence();
  Entry& e = cache().get({0, int(ta), int(tb), ar, ac, br, bc, m, n, bits(alpha), bits(beta)}, [&] {
    const memory::desc ad = ta == Op::none ? memory::desc({m, k}, f32, dims{ac, 1}) : memory::desc({m, k}, f32, dims{1, ac});
    const memory::desc bd = tb == Op::none ? memory::desc({k, n}, f32, dims{bc, 1}) : memory::desc({k, n}, f32, dims{1, bc});
    const memory::desc cd({m, n}, f32, dims{n, 1});
    return make_matmul(ad, bd, nullptr, cd, alpha, beta);
  });
  e.run({{DNNL_ARG_SRC, a.data()}, {DNNL_ARG_WEIGHTS, b.data()}, {DNNL_ARG_DST, c.data()}});
}

void gemm_bias(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstMatrix<float> bias,
               Matrix<float> y) {
  const std::int64_t m = std::int64_t(x.extent(0)), k = std::int64_t(x.extent(1)), n = std::int64_t(w.extent(1));
  if (m == 0) return;
  if (k == 0) {
    portable::gemm_bias<float>(space, x, w, bias, y);
    return;
  }
  space.fence();
  Entry& e = cache().get({1, m, k, n}, [&] {
    const memory::desc xd({m, k}, f32, dims{k, 1}), wd({k, n}, f32, dims{n, 1}), bd({1, n}, f32, dims{n, 1}),
        yd({m, n}, f32, dims{n, 1});
    return make_matmul(xd, wd, &bd, yd, 1.0f, 0.0f);
  });
  e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_BIAS, bias.data()},
         {DNNL_ARG_DST, y.data()}});
}

void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                  const float* a, const Strided& sa, const float* b, const Strided& sb, float beta, float* c,
                  const Strided& sc) {
  if (sc.rows == 0 || sc.cols == 0) return;
  if ((ta == Op::none ? sa.cols : sa.rows) == 0) {
    portable::batched_gemm<float>(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
    return;
  }
  space.fence();
  Entry& e = cache().get({2, int(ta), int(tb), outer, inner, bits(alpha), bits(beta),
                          sa.rows, sa.cols, sa.ld, sa.outer_stride, sa.inner_stride,
                          sb.rows, sb.cols, sb.ld, sb.outer_stride, sb.inner_stride,
                          sc.rows, sc.cols, sc.ld, sc.outer_stride, sc.inner_stride}, [&] {
    return make_matmul(batched_desc(ta, outer, inner, sa), batched_desc(tb, outer, inner, sb), nullptr,
                       batched_desc(Op::none, outer, inner, sc), alpha, beta);
  });
  e.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
}

// Prepacked parameter operands (fp32; gemm.hpp, FrozenWeights). Each W
// (address, stored shape, form: as stored or transposed) has one packed copy
// in the blocked layout its matmul asks for (format_tag::any), remade when
// the scope number or the layout changes. A W's first product in a scope
// runs the plain primitive (at M = 1 every W is used once per step and a
// packing would cost what it saves); from the second on, the packed one.
// When the outermost scope ends, the W it did not use are dropped (a
// destroyed Pipeline's weights do not stay packed for the process).
// Below AVX-512 nothing is packed: there the matmul with blocked weights
// is another kernel than the plain one, with other bits (backend.hpp,
// onednn_f32_gemm_rule).
namespace {

struct Packed {
  memory mem;                 // the packed copy (allocated by oneDNN)
  memory plain;               // W as stored, in this form (handle set per packing)
  dnnl::reorder reorder;      // plain -> mem
  std::uint64_t seen = 0;     // the last scope W was used in
  std::uint64_t packed = 0;   // the scope mem was packed in
};

// Key: W's address, stored shape, form, the packed copy's element type (f32,
// or bf16), and the source's (f32: W itself; bf16: its registered bf16
// weight copy, reduced.hpp, which the optimizer writes in its update).
using PackKey = std::tuple<const float*, std::int64_t, std::int64_t, int, int, int>;

std::map<PackKey, Packed>& packs() {
  static std::map<PackKey, Packed> p;
  return p;
}

// The memory a pack of `key` reads: W, or its bf16 weight copy (converted
// now if the copy is stale; null when W is no longer in the registered copy).
const void* pack_source(const PackKey& key) {
  const float* w = std::get<0>(key);
  if (memory::data_type(std::get<5>(key)) == f32) return w;
  return reduced::weight_copy(w, std::get<1>(key) * std::get<2>(key));
}

// W (fp32, stored wr x wc) in form `tw` as the B operand (k, n) of a matmul
// whose weights descriptor is `want` (f32, or bf16: the reorder converts,
// rounding to nearest even; with `from_copy`, from W's bf16 weight copy,
// 2 bytes a value read instead of 4, the same bits): the packed copy for
// `scope`, or nullptr on W's first use in it unless `first_use` (bf16:
// packed at the first use too, see gemm_bias_weights_bf16).
const void* packed_weights(const float* w, std::int64_t wr, std::int64_t wc, Op tw, const memory::desc& want,
                           std::uint64_t scope, bool first_use = false, bool from_copy = false) {
  const memory::data_type source_type = from_copy ? bf16_t : f32;
  const PackKey key{w, wr, wc, int(tw), int(want.data_type()), int(source_type)};
  Packed& p = packs()[key];
  if (p.seen != scope) {
    p.seen = scope;
    if (!first_use) return nullptr;
  }
  if (!p.mem || !(p.mem.get_desc() == want)) {
    const std::int64_t k = tw == Op::none ? wr : wc, n = tw == Op::none ? wc : wr;
    const memory::desc plain = tw == Op::none ? memory::desc({k, n}, source_type, dims{wc, 1})
                                              : memory::desc({k, n}, source_type, dims{1, wc});
    p.mem = memory(want, engine());
    p.plain = unbound(plain);
    p.reorder = dnnl::reorder(p.plain, p.mem);
    p.packed = 0;
  }
  if (p.packed != scope) {
    const void* source = pack_source(key);
    if (source == nullptr) throw std::logic_error("gpipe::kernels::onednn: packing W from a bf16 weight copy that is not registered");
    p.plain.set_data_handle(const_cast<void*>(source));
    p.reorder.execute(stream(), p.plain, p.mem);
    stream().wait();
    p.packed = scope;
  }
  return p.mem.get_data_handle();
}

memory::desc any_weights(std::int64_t k, std::int64_t n, memory::data_type t = f32) {
  return memory::desc({k, n}, t, memory::format_tag::any);
}

// make_matmul with weights of format_tag::any (of a's element type): the
// weights memory object takes the layout the primitive chose.
Entry make_packed_matmul(const memory::desc& a, std::int64_t k, std::int64_t n, const memory::desc* bias,
                         const memory::desc& c, float alpha, float beta) {
  const memory::desc w = any_weights(k, n, a.data_type());
  const auto desc = bias ? dnnl::matmul::desc(a, w, *bias, c) : dnnl::matmul::desc(a, w, c);
  const dnnl::matmul::primitive_desc pd(desc, user_scratchpad(attributes(alpha, beta)), engine());
  Entry e;
  e.primitive = dnnl::matmul(pd);
  e.args = {{DNNL_ARG_SRC, unbound(a)}, {DNNL_ARG_WEIGHTS, unbound(pd.weights_desc())}, {DNNL_ARG_DST, unbound(c)}};
  if (bias) e.args.emplace(DNNL_ARG_BIAS, unbound(*bias));
  e.use_scratchpad(pd.scratchpad_desc());
  return e;
}

}  // namespace

void drop_unused_packs(std::uint64_t scope) {
  auto& p = packs();
  for (auto it = p.begin(); it != p.end();) it = it->second.seen == scope ? std::next(it) : p.erase(it);
}

bool pack_next(std::uint64_t scope, const void* begin, const void* end) {
  if (!cpu_traits().avx512_core) return false;  // nothing is packed below AVX-512
  const auto* lo = static_cast<const char*>(begin);
  const auto* hi = static_cast<const char*>(end);
  for (auto& [key, p] : packs()) {
    if (!p.mem || p.packed == scope) continue;
    const float* w = std::get<0>(key);
    const auto* first = reinterpret_cast<const char*>(w);
    const std::int64_t bytes = std::get<1>(key) * std::get<2>(key) * std::int64_t(sizeof(float));
    if (first < lo || first + bytes > hi) continue;  // another scope's W: it may be gone
    const void* source = pack_source(key);
    if (source == nullptr) continue;  // its bf16 copy is gone: packed at its first product, if any
    p.plain.set_data_handle(const_cast<void*>(source));
    p.reorder.execute(stream(), p.plain, p.mem);
    stream().wait();
    p.packed = p.seen = scope;  // its first product in the scope runs packed
    return true;
  }
  return false;
}

std::int64_t packed_bytes() {
  std::int64_t bytes = 0;
  for (const auto& [key, p] : packs())
    if (p.mem) bytes += std::int64_t(p.mem.get_desc().get_size());
  return bytes;
}

void gemm_bias_weights(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstMatrix<float> bias,
                       Matrix<float> y, std::uint64_t scope) {
  const std::int64_t m = std::int64_t(x.extent(0)), k = std::int64_t(x.extent(1)), n = std::int64_t(w.extent(1));
  if (m == 0 || k == 0 || scope == 0 || !cpu_traits().avx512_core) return gemm_bias(space, x, w, bias, y);
  Entry& e = cache().get({3, m, k, n}, [&] {
    const memory::desc xd({m, k}, f32, dims{k, 1}), bd({1, n}, f32, dims{n, 1}), yd({m, n}, f32, dims{n, 1});
    return make_packed_matmul(xd, k, n, &bd, yd, 1.0f, 0.0f);
  });
  space.fence();
  const void* packed = packed_weights(w.data(), k, n, Op::none, e.args.at(DNNL_ARG_WEIGHTS).get_desc(), scope);
  if (!packed) return gemm_bias(space, x, w, bias, y);
  e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_BIAS, bias.data()},
         {DNNL_ARG_DST, y.data()}});
}

void gemm_weights(const ExecSpace& space, Op ta, Op tw, float alpha, ConstMatrix<float> a, ConstMatrix<float> w,
                  float beta, Matrix<float> c, std::uint64_t scope) {
  const std::int64_t ar = std::int64_t(a.extent(0)), ac = std::int64_t(a.extent(1));
  const std::int64_t wr = std::int64_t(w.extent(0)), wc = std::int64_t(w.extent(1));
  const std::int64_t m = std::int64_t(c.extent(0)), n = std::int64_t(c.extent(1));
  const std::int64_t k = ta == Op::none ? ac : ar;
  if (m == 0 || n == 0 || k == 0 || scope == 0 || !cpu_traits().avx512_core)
    return gemm(space, ta, tw, alpha, a, w, beta, c);
  Entry& e = cache().get({4, int(ta), int(tw), ar, ac, wr, wc, m, n, bits(alpha), bits(beta)}, [&] {
    const memory::desc ad = ta == Op::none ? memory::desc({m, k}, f32, dims{ac, 1}) : memory::desc({m, k}, f32, dims{1, ac});
    const memory::desc cd({m, n}, f32, dims{n, 1});
    return make_packed_matmul(ad, k, n, nullptr, cd, alpha, beta);
  });
  space.fence();
  const void* packed = packed_weights(w.data(), wr, wc, tw, e.args.at(DNNL_ARG_WEIGHTS).get_desc(), scope);
  if (!packed) return gemm(space, ta, tw, alpha, a, w, beta, c);
  e.run({{DNNL_ARG_SRC, a.data()}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, c.data()}});
}

CpuTraits cpu_traits() {
  static const CpuTraits traits = [] {
    CpuTraits t;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_is("intel"))
      t.vendor = CpuVendor::intel;
    else if (__builtin_cpu_is("amd"))
      t.vendor = CpuVendor::amd;
#endif
    const auto isa = unsigned(dnnl::get_effective_cpu_isa());
    const auto has = [isa](dnnl::cpu_isa want) { return (isa & unsigned(want)) == unsigned(want); };
    t.avx512_core = has(dnnl::cpu_isa::avx512_core);
    t.avx512_bf16 = has(dnnl::cpu_isa::avx512_core_bf16);
    t.amx = has(dnnl::cpu_isa::avx512_core_amx);
    return t;
  }();
  return traits;
}

// bf16 operands (converted by the caller, dispatch.cpp), fp32 accumulation
// and fp32 results: the same matmul descriptors with bf16 sources.

void gemm_bf16(const ExecSpace& space, Op ta, Op tb, float alpha, const bf16* a, std::int64_t ar, std::int64_t ac,
               const bf16* b, std::int64_t br, std::int64_t bc, float beta, Matrix<float> c) {
  const std::int64_t m = std::int64_t(c.extent(0)), n = std::int64_t(c.extent(1));
  const std::int64_t k = ta == Op::none ? ac : ar;
  space.fence();
  Entry& e = cache().get({10, int(ta), int(tb), ar, ac, br, bc, m, n, bits(alpha), bits(beta)}, [&] {
    const memory::desc ad = ta == Op::none ? memory::desc({m, k}, bf16_t, dims{ac, 1})
                                           : memory::desc({m, k}, bf16_t, dims{1, ac});
    const memory::desc bd = tb == Op::none ? memory::desc({k, n}, bf16_t, dims{bc, 1})
                                           : memory::desc({k, n}, bf16_t, dims{1, bc});
    const memory::desc cd({m, n}, f32, dims{n, 1});
    return make_matmul(ad, bd, nullptr, cd, alpha, beta);
  });
  e.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c.data()}});
}

void gemm_bias_bf16(const ExecSpace& space, const bf16* x, std::int64_t m, std::int64_t k, const bf16* w,
                    std::int64_t n, ConstMatrix<float> bias, Matrix<float> y) {
  space.fence();
  Entry& e = cache().get({11, m, k, n}, [&] {
    const memory::desc xd({m, k}, bf16_t, dims{k, 1}), wd({k, n}, bf16_t, dims{n, 1}), bd({1, n}, f32, dims{n, 1}),
        yd({m, n}, f32, dims{n, 1});
    return make_matmul(xd, wd, &bd, yd, 1.0f, 0.0f);
  });
  e.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias.data()}, {DNNL_ARG_DST, y.data()}});
}

void batched_gemm_bf16(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                       const bf16* a, const Strided& sa, const bf16* b, const Strided& sb, float beta, float* c,
                       const Strided& sc) {
  space.fence();
  Entry& e = cache().get({12, int(ta), int(tb), outer, inner, bits(alpha), bits(beta),
                          sa.rows, sa.cols, sa.ld, sa.outer_stride, sa.inner_stride,
                          sb.rows, sb.cols, sb.ld, sb.outer_stride, sb.inner_stride,
                          sc.rows, sc.cols, sc.ld, sc.outer_stride, sc.inner_stride}, [&] {
    return make_matmul(batched_desc(ta, outer, inner, sa, bf16_t), batched_desc(tb, outer, inner, sb, bf16_t),
                       nullptr, batched_desc(Op::none, outer, inner, sc), alpha, beta);
  });
  e.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
}

// Prepacked bf16 parameter operands (gemm.hpp, FrozenWeights): W, fp32
// master weights inside the registered bf16 weight copy's range, is
// packed from that copy in one oneDNN reorder (bf16 plain -> bf16 blocked:
// 2 bytes a value read, not 4; 0.19 against 0.44 ms for a 1024 x 1024 W on
// an AMX Xeon) once per scope, in its forward form only (dY W^T reads the
// plain copy: packing the transposed form cost more than it saved,
// dispatch.cpp). The copy is marked stale at each registration
// (WeightCopy::refresh, once a step) and converted once, at its first
// read, by one oneDNN reorder (reduced.cpp, convert.hpp); writing it inside
// the optimizer's update was measured slower (perf/README.md, "Issue 22:
// conversions through oneDNN"). With AMX a bf16 matmul on plain weights
// reorders them into its blocked layout inside every call; on the packed
// copy it runs 2.5x faster at 32 x 1024 x 1024 and 1.2x at 256 rows
// (perf/README.md, "Issue 22: bf16 weights packed once a step"). Unlike
// the f32 packs, a bf16 W is packed at its first use in a scope too (M = 1
// uses each W once a step in each form, and the pack replaces the
// conversion of the copy), so every product of a W in a scope runs the
// same primitive. The results are bitwise those of the plain bf16
// primitive on the copy (tests/unit/test_reduced_precision.cpp,
// PackedBf16WeightsBitwisePlain).

void gemm_bias_weights_bf16(const ExecSpace& space, const bf16* x, std::int64_t m, std::int64_t k, const float* w,
                            std::int64_t n, ConstMatrix<float> bias, Matrix<float> y, std::uint64_t scope) {
  Entry& e = cache().get({13, m, k, n}, [&] {
    const memory::desc xd({m, k}, bf16_t, dims{k, 1}), bd({1, n}, f32, dims{n, 1}), yd({m, n}, f32, dims{n, 1});
    return make_packed_matmul(xd, k, n, &bd, yd, 1.0f, 0.0f);
  });
  (void)reduced::weight_copy(w, k * n);  // converts a stale copy before the fence
  space.fence();
  const void* packed = packed_weights(w, k, n, Op::none, e.args.at(DNNL_ARG_WEIGHTS).get_desc(), scope, true, true);
  e.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_BIAS, bias.data()}, {DNNL_ARG_DST, y.data()}});
}

void gemm_weights_bf16(const ExecSpace& space, Op ta, Op tw, float alpha, const bf16* a, std::int64_t ar,
                       std::int64_t ac, const float* w, std::int64_t wr, std::int64_t wc, float beta, Matrix<float> c,
                       std::uint64_t scope) {
  const std::int64_t m = std::int64_t(c.extent(0)), n = std::int64_t(c.extent(1));
  const std::int64_t k = ta == Op::none ? ac : ar;
  Entry& e = cache().get({14, int(ta), int(tw), ar, ac, wr, wc, m, n, bits(alpha), bits(beta)}, [&] {
    const memory::desc ad = ta == Op::none ? memory::desc({m, k}, bf16_t, dims{ac, 1})
                                           : memory::desc({m, k}, bf16_t, dims{1, ac});
    const memory::desc cd({m, n}, f32, dims{n, 1});
    return make_packed_matmul(ad, k, n, nullptr, cd, alpha, beta);
  });
  (void)reduced::weight_copy(w, wr * wc);  // converts a stale copy before the fence
  space.fence();
  const void* packed = packed_weights(w, wr, wc, tw, e.args.at(DNNL_ARG_WEIGHTS).get_desc(), scope, true, true);
  e.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, c.data()}});
}

}  // namespace gpipe::kernels::onednn

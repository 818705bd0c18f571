// oneDNN primitives at the decks' shapes, f32 against bf16 (issue 22;
// perf/README.md, "Issue 22: the bf16 primitives without AMX"): the matmul
// with plain and `format_tag::any` (blocked, reordered once) weights, f32 and
// bf16 destination, bias and a ReLU post-op, for the deep MLP (256 and 32 rows
// x 1024 x 1024: forward, backward-data dY W^T, backward-weights X^T dY), the
// ViT (2048 token rows x 64/128/192) and the CNN's dense layer; the direct
// convolution (forward, backward-data, backward-weights) at the CNN deck's
// three conv shapes (batch 128, 3x3, padding 1), layouts `any`, bf16 src /
// weights / diff_dst with f32 results. Prints the time per call (best of 5
// rounds), GFLOP/s for the matmuls and the implementation oneDNN chose
// (pd.impl_info_str(), as ONEDNN_VERBOSE=1 shows it).
//
//   OMP_NUM_THREADS=1 build/perf/gpipe_bench_onednn_bf16            # both (about 30 s)
//   OMP_NUM_THREADS=1 build/perf/gpipe_bench_onednn_bf16 matmul 0   # one matmul shape (0..11)
//   OMP_NUM_THREADS=1 build/perf/gpipe_bench_onednn_bf16 conv
//
// Plain oneDNN, no gpipe code: it measures the library on this CPU.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using dt = memory::data_type;
using tag = memory::format_tag;
static engine eng(engine::kind::cpu, 0);
static stream st(eng);

static double bench(int64_t m, int64_t k, int64_t n, bool ta, bool tb, dt t, bool wany, dt dst, bool bias, bool relu, int reps) {
  memory::desc ad = ta ? memory::desc({m, k}, t, memory::dims{1, m}) : memory::desc({m, k}, t, memory::dims{k, 1});
  memory::desc bd_plain = tb ? memory::desc({k, n}, t, memory::dims{1, k}) : memory::desc({k, n}, t, memory::dims{n, 1});
  memory::desc bd = wany ? memory::desc({k, n}, t, tag::any) : bd_plain;
  memory::desc cd({m, n}, dst, memory::dims{n, 1});
  memory::desc biasd({1, n}, dt::f32, memory::dims{n, 1});
  primitive_attr attr;
  if (relu) { post_ops po; po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); attr.set_post_ops(po); }
  auto d = bias ? matmul::desc(ad, bd, biasd, cd) : matmul::desc(ad, bd, cd);
  matmul::primitive_desc pd(d, attr, eng);
  matmul p(pd);
  memory A(ad, eng), Bp(bd_plain, eng), C(cd, eng), Bi(biasd, eng);
  memory B = Bp;
  if (wany && pd.weights_desc() != bd_plain) { B = memory(pd.weights_desc(), eng); reorder(Bp, B).execute(st, Bp, B); }
  std::fill((char*)A.get_data_handle(), (char*)A.get_data_handle() + ad.get_size(), 0x3f);
  std::fill((char*)B.get_data_handle(), (char*)B.get_data_handle() + pd.weights_desc().get_size(), 0x3f);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}};
  if (bias) args[DNNL_ARG_BIAS] = Bi;
  for (int i = 0; i < 3; ++i) p.execute(st, args);
  st.wait();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) p.execute(st, args);
    st.wait();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    if (s < best) best = s;
  }
  const char* impl = pd.impl_info_str();
  double gf = 2.0 * m * k * n / best / 1e9;
  printf("%6ld %5ld %5ld ta%d tb%d %-4s wei:%-5s dst:%-4s bias%d relu%d  %8.3f ms  %6.1f GF/s  %s\n", (long)m, (long)k, (long)n, ta, tb,
         t == dt::f32 ? "f32" : "bf16", wany ? "any" : "plain", dst == dt::f32 ? "f32" : "bf16", bias, relu, best * 1e3, gf, impl);
  return best;
}

static int matmuls(int which) {
  struct S { int64_t m, k, n; bool ta, tb, bias; const char* what; };
  std::vector<S> shapes = {
    {256, 1024, 1024, false, false, true, "mlp fwd"},
    {256, 1024, 1024, false, true, false, "mlp bwd data (dY W^T)"},
    {1024, 256, 1024, true, false, false, "mlp bwd wei (X^T dY)"},
    {32, 1024, 1024, false, false, true, "mlp fwd m32"},
    {32, 1024, 1024, false, true, false, "mlp bwd data m32"},
    {1024, 32, 1024, true, false, false, "mlp bwd wei m32"},
    {2048, 64, 192, false, false, true, "vit qkv"},
    {2048, 64, 128, false, false, true, "vit mlp1"},
    {2048, 128, 64, false, false, true, "vit mlp2"},
    {2048, 128, 64, false, true, false, "vit mlp1 bwd data"},
    {64, 2048, 128, true, false, false, "vit mlp1 bwd wei"},
    {128, 1568, 128, false, false, true, "cnn dense"},
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (which >= 0 && (int)i != which) continue;
    auto& s = shapes[i];
    printf("# %s\n", s.what);
    double flop = 2.0 * s.m * s.k * s.n;
    int reps = std::max(3, int(2e9 / flop));
    bench(s.m, s.k, s.n, s.ta, s.tb, dt::f32, false, dt::f32, s.bias, false, reps);
    bench(s.m, s.k, s.n, s.ta, s.tb, dt::f32, true, dt::f32, s.bias, false, reps);
    bench(s.m, s.k, s.n, s.ta, s.tb, dt::bf16, false, dt::f32, s.bias, false, reps);
    bench(s.m, s.k, s.n, s.ta, s.tb, dt::bf16, true, dt::f32, s.bias, false, reps);
    bench(s.m, s.k, s.n, s.ta, s.tb, dt::bf16, false, dt::bf16, s.bias, false, reps);
    bench(s.m, s.k, s.n, s.ta, s.tb, dt::bf16, true, dt::bf16, s.bias, false, reps);
    if (s.bias) bench(s.m, s.k, s.n, s.ta, s.tb, dt::bf16, true, dt::bf16, s.bias, true, reps);
    fflush(stdout);
  }
  return 0;
}

// Best of 5 rounds of 10 calls, seconds per call.
template <class P>
static double timed(P& p, std::unordered_map<int, memory>& args) {
  for (int i = 0; i < 3; ++i) p.execute(st, args);
  st.wait();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) p.execute(st, args);
    st.wait();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
  }
  return best;
}

static int convolutions() {
  struct S {
    int n, c, h, w, f;
  } shapes[] = {{128, 1, 28, 28, 8}, {128, 8, 28, 28, 16}, {128, 16, 14, 14, 32}};  // the CNN deck's
  const memory::dims stride{1, 1}, pad{1, 1};
  for (const S s : shapes)
    for (const dt t : {dt::f32, dt::bf16}) {
      const char* tn = t == dt::f32 ? "f32 " : "bf16";
      const memory::desc src({s.n, s.c, s.h, s.w}, t, tag::any), wei({s.f, s.c, 3, 3}, t, tag::any),
          dst({s.n, s.f, s.h, s.w}, dt::f32, tag::any), dsrc({s.n, s.c, s.h, s.w}, dt::f32, tag::any),
          ddst({s.n, s.f, s.h, s.w}, t, tag::any), dwei({s.f, s.c, 3, 3}, dt::f32, tag::any);
      const convolution_forward::primitive_desc pd(
          convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, src, wei, dst,
                                    stride, pad, pad),
          eng);
      {
        convolution_forward p(pd);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(pd.src_desc(), eng)},
                                             {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), eng)},
                                             {DNNL_ARG_DST, memory(pd.dst_desc(), eng)}};
        printf("conv forward      n%d c%d %dx%d f%d %s %8.3f ms  %s\n", s.n, s.c, s.h, s.w, s.f, tn,
               timed(p, args) * 1e3, pd.impl_info_str());
      }
      {
        const convolution_backward_data::primitive_desc bpd(
            convolution_backward_data::desc(algorithm::convolution_direct, dsrc, wei, ddst, stride, pad, pad), eng, pd);
        convolution_backward_data p(bpd);
        std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_SRC, memory(bpd.diff_src_desc(), eng)},
                                             {DNNL_ARG_WEIGHTS, memory(bpd.weights_desc(), eng)},
                                             {DNNL_ARG_DIFF_DST, memory(bpd.diff_dst_desc(), eng)}};
        printf("conv backward_data n%d c%d %dx%d f%d %s %8.3f ms  %s\n", s.n, s.c, s.h, s.w, s.f, tn,
               timed(p, args) * 1e3, bpd.impl_info_str());
      }
      {
        const convolution_backward_weights::primitive_desc wpd(
            convolution_backward_weights::desc(algorithm::convolution_direct, src, dwei, ddst, stride, pad, pad), eng,
            pd);
        convolution_backward_weights p(wpd);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(wpd.src_desc(), eng)},
                                             {DNNL_ARG_DIFF_WEIGHTS, memory(wpd.diff_weights_desc(), eng)},
                                             {DNNL_ARG_DIFF_DST, memory(wpd.diff_dst_desc(), eng)}};
        printf("conv backward_wei  n%d c%d %dx%d f%d %s %8.3f ms  %s\n", s.n, s.c, s.h, s.w, s.f, tn,
               timed(p, args) * 1e3, wpd.impl_info_str());
      }
      fflush(stdout);
    }
  return 0;
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  printf("# %s, max ISA 0x%x (AMX needs 0x3e7)\n", "oneDNN", unsigned(get_effective_cpu_isa()));
  if (what == "all" || what == "matmul") matmuls(argc > 2 ? atoi(argv[2]) : -1);
  if (what == "all" || what == "conv") convolutions();
  return 0;
}

// Mixed precision (issue 22): the precision policy, the seam's bf16 / fp16
// compute formats (gpipe/kernels/backend.hpp, set_compute_format), the
// 16-bit wire conversion and the loss scaler.
//
// Tolerances: a rounded operand differs from the float one by at most
// u |x| (u = eps / 2: 2^-8 bf16, 2^-11 fp16), so a product of two by at
// most (2u + u^2) |a||b|; a k-term fp32 sum adds gamma_k = k 2^-24 / (1 -
// k 2^-24) (Higham 2002, eq. 3.13) of sum |a||b|. Against the exact product
// of the ROUNDED operands only gamma_k remains (every product of two 8-bit
// or 11-bit significands is exact in fp32), which is how the portable and
// oneDNN implementations are held to "the same thing up to summation order".

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "../common/kernel_choice.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/half.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/kernels/attention.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/conv.hpp"
#include "gpipe/kernels/convert.hpp"
#include "gpipe/kernels/gemm.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/optim/loss_scale.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/stage.hpp"
#include "gpipe/pipeline/transport.hpp"
#include "gpipe/pipeline/wire_format.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

using kernels::Choice;
using kernels::ComputeScope;
using kernels::Op;

// A kernels choice and a bf16 route, forced for a scope.
struct Forced {
  Choice choice;
  kernels::Bf16Route route;
};
const char* name(const Forced& f) {
  if (f.choice == Choice::portable) return "portable";
  return f.route == kernels::Bf16Route::native ? "onednn, bf16 route native" : "onednn, bf16 route rounded";
}

struct Selected {
  explicit Selected(Forced f) {
    kernels::select(f.choice);
    kernels::select_bf16_route(f.route);
  }
  ~Selected() {
    kernels::select(Choice::automatic);
    kernels::select_bf16_route(kernels::Bf16Route::automatic);
  }
};

// Every implementation, and with oneDNN both bf16 routes (its bf16
// primitives, and its f32 ones on rounded operands), whatever
// bf16_native_rule picks on this CPU.
std::vector<Forced> forced_choices() {
  std::vector<Forced> out;
  for (auto i : kernels::available())
    if (i == kernels::Implementation::portable) {
      out.push_back({Choice::portable, kernels::Bf16Route::automatic});
    } else if (i == kernels::Implementation::onednn) {
      if (kernels::has(kernels::Implementation::onednn, kernels::Primitive::gemm, 2))  // AVX-512 and up
        out.push_back({Choice::onednn, kernels::Bf16Route::native});
      out.push_back({Choice::onednn, kernels::Bf16Route::rounded});
    }
  return out;
}

float round_to(Format f, float v) { return f == Format::bf16 ? float(bf16(v)) : float(fp16(v)); }
double unit_roundoff(Format f) { return f == Format::bf16 ? 0x1p-8 : 0x1p-11; }
double gamma32(std::int64_t k) { return double(k) * 0x1p-24 / (1.0 - double(k) * 0x1p-24); }

std::vector<float> host_random(std::int64_t n, std::uint64_t seed) {
  const auto d = test::uniform(size_t(n), seed, -1, 1);
  return std::vector<float>(d.begin(), d.end());
}

TEST(Precision, PolicyTable) {
  const Precision f = precision_policy("float"), d = precision_policy("double");
  const Precision b = precision_policy("bf16"), h = precision_policy("fp16");
  EXPECT_EQ(f.compute, Format::fp32);
  EXPECT_EQ(f.wire_bytes(), 4);
  EXPECT_FALSE(f.reduced());
  EXPECT_EQ(d.master_bytes(), 8);
  EXPECT_EQ(d.wire, Format::fp64);
  EXPECT_EQ(b.compute, Format::bf16);
  EXPECT_EQ(b.accumulate, Format::fp32);
  EXPECT_EQ(b.master, Format::fp32);
  EXPECT_EQ(b.wire_bytes(), 2);
  EXPECT_FALSE(b.loss_scaling);
  EXPECT_EQ(h.compute, Format::fp16);
  EXPECT_TRUE(h.loss_scaling);
  EXPECT_EQ(h.master_bytes(), 4);
  try {
    precision_policy("half", "d.yaml: precision");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "d.yaml: precision: unknown precision 'half' (expected float, double, bf16 or fp16)");
  }
  EXPECT_EQ(with_scalar("bf16", [](auto t) { return int(sizeof(t)); }), 4);
  EXPECT_EQ(with_scalar("fp16", [](auto t) { return int(sizeof(t)); }), 4);
  EXPECT_EQ(with_scalar("double", [](auto t) { return int(sizeof(t)); }), 8);
}

// The bf16 route rule of `kernels: auto` (backend.hpp, bf16_native_rule),
// pinned on given CPUs, as its table of measurements says: AMX native on
// any vendor; AVX-512 BF16 without AMX native on AMD (Zen 5 measured),
// rounded on Intel (Xeon measured) and on other vendors; no AVX-512 BF16
// rounded; eltwise (no bf16 primitive) never native.
TEST(ReducedPrecision, Bf16RouteRule) {
  using kernels::CpuTraits;
  using kernels::CpuVendor;
  using kernels::Primitive;
  const Primitive heavy[] = {Primitive::gemm, Primitive::gemm_bias, Primitive::batched_gemm, Primitive::attention,
                             Primitive::conv2d};
  struct Case {
    CpuTraits cpu;
    bool native;
  };
  const Case cases[] = {
      {{CpuVendor::intel, true, true}, true},     // Sapphire Rapids and newer (AMX)
      {{CpuVendor::intel, true, false}, false},   // Xeon with AVX-512 BF16, no AMX (measured: 0.47-0.99x)
      {{CpuVendor::intel, false, false}, false},  // no bf16 kernels at all
      {{CpuVendor::amd, true, false}, true},      // AMD EPYC Zen 5 (measured: 1.3-3.7x matmul)
      {{CpuVendor::amd, false, false}, false},    // AMD without AVX-512 BF16 (Zen 3 and older)
      {{CpuVendor::other, true, false}, false},   // another vendor's AVX-512 BF16: not measured
      {{CpuVendor::other, true, true}, true},     // AMX is native wherever it is
  };
  for (const Case& c : cases)
    for (const Primitive p : heavy)
      EXPECT_EQ(kernels::bf16_native_rule(c.cpu, p), c.native)
          << kernels::name(c.cpu.vendor) << " avx512_bf16 " << c.cpu.avx512_bf16 << " amx " << c.cpu.amx << " "
          << kernels::name(p);
  EXPECT_FALSE(kernels::bf16_native_rule({CpuVendor::amd, true, true}, Primitive::eltwise));
  EXPECT_FALSE(kernels::bf16_native_rule({CpuVendor::amd, true, false}, Primitive::eltwise));
}

// What `auto` runs at bf16 is the rule's decision on this CPU; the route
// override forces either route (and `kernels: portable` stays portable);
// --version / the run record say which (selection_summary); a bad word is
// an InputError naming the field.
TEST(ReducedPrecision, Bf16RouteOverrideAndReport) {
  using kernels::Bf16Route;
  using kernels::Implementation;
  using kernels::Primitive;
  const bool onednn = kernels::has(Implementation::onednn, Primitive::gemm, 2);
  const bool native = kernels::bf16_native_rule(kernels::this_cpu(), Primitive::gemm);
  EXPECT_EQ(kernels::selected_bf16_route(), Bf16Route::automatic);
  EXPECT_EQ(kernels::implementation(Primitive::gemm, 2),
            onednn && native ? Implementation::onednn : Implementation::portable);
  const std::string summary = kernels::selection_summary();
  EXPECT_NE(summary.find(std::string("bf16 route auto (cpu ") + kernels::name(kernels::this_cpu().vendor)),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find(native ? "rule native)" : "rule rounded)"), std::string::npos) << summary;
  EXPECT_NE(summary.find(std::string("gemm bf16 ") + (onednn && native ? "onednn" : "portable")), std::string::npos)
      << summary;
  {
    Selected sel({Choice::automatic, Bf16Route::native});
    for (const Primitive p : {Primitive::gemm, Primitive::gemm_bias, Primitive::batched_gemm, Primitive::conv2d})
      EXPECT_EQ(kernels::implementation(p, 2), onednn ? Implementation::onednn : Implementation::portable);
    EXPECT_NE(kernels::selection_summary().find("bf16 route native"), std::string::npos);
  }
  {
    Selected sel({Choice::onednn, Bf16Route::rounded});
    for (const Primitive p : {Primitive::gemm, Primitive::gemm_bias, Primitive::batched_gemm, Primitive::conv2d})
      EXPECT_EQ(kernels::implementation(p, 2), Implementation::portable);
    if (onednn) EXPECT_EQ(kernels::implementation(Primitive::gemm, 4), Implementation::onednn);  // f32 still oneDNN
  }
  {
    Selected sel({Choice::portable, Bf16Route::native});
    EXPECT_EQ(kernels::implementation(Primitive::gemm, 2), Implementation::portable);
  }
  EXPECT_EQ(kernels::parse_bf16_route("rounded", "f"), Bf16Route::rounded);
  EXPECT_EQ(kernels::parse_bf16_route("native", "f"), Bf16Route::native);
  EXPECT_EQ(kernels::parse_bf16_route("auto", "f"), Bf16Route::automatic);
  try {
    kernels::parse_bf16_route("amx", "environment variable GPIPE_BF16_ROUTE");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "environment variable GPIPE_BF16_ROUTE: unknown bf16 route 'amx' (expected auto, native or rounded)");
  }
}

// C = alpha op(A) op(B) + beta C in every compute format and implementation.
TEST(ReducedPrecision, GemmAgainstRoundedOperands) {
  struct Case {
    std::int64_t m, n, k;
    Op ta, tb;
    float alpha, beta;
  };
  const Case cases[] = {{1, 1, 1, Op::none, Op::none, 1, 0},       {13, 7, 65, Op::none, Op::transpose, 0.7f, 1.3f},
                        {33, 17, 300, Op::transpose, Op::none, 1, 0}, {64, 10, 1024, Op::none, Op::none, 1, 0},
                        {5, 6, 9, Op::transpose, Op::transpose, 1, 1}};
  for (const Format f : {Format::bf16, Format::fp16})
    for (const Case& c : cases) {
      const std::int64_t ar = c.ta == Op::none ? c.m : c.k, ac = c.ta == Op::none ? c.k : c.m;
      const std::int64_t br = c.tb == Op::none ? c.k : c.n, bc = c.tb == Op::none ? c.n : c.k;
      const auto a = host_random(ar * ac, 11), b = host_random(br * bc, 12), c0 = host_random(c.m * c.n, 13);
      auto A = [&](std::int64_t i, std::int64_t l) { return c.ta == Op::none ? a[size_t(i * ac + l)] : a[size_t(l * ac + i)]; };
      auto B = [&](std::int64_t l, std::int64_t j) { return c.tb == Op::none ? b[size_t(l * bc + j)] : b[size_t(j * bc + l)]; };
      std::vector<double> exact_rounded(size_t(c.m * c.n)), exact(size_t(c.m * c.n)), bound(size_t(c.m * c.n));
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < c.n; ++j) {
          double s = 0, t = 0, abs = 0;
          for (std::int64_t l = 0; l < c.k; ++l) {
            s += double(round_to(f, A(i, l))) * double(round_to(f, B(l, j)));
            t += double(A(i, l)) * double(B(l, j));
            abs += std::abs(double(A(i, l)) * double(B(l, j)));
          }
          const size_t o = size_t(i * c.n + j);
          exact_rounded[o] = c.alpha * s + c.beta * double(c0[o]);
          exact[o] = c.alpha * t + c.beta * double(c0[o]);
          bound[o] = std::abs(c.alpha) * abs + std::abs(c.beta * double(c0[o]));
        }
      const double u = unit_roundoff(f);
      for (const Forced choice : forced_choices()) {
        Selected sel(choice);
        const ComputeScope scope(f);
        Matrix<float> out = test::to_device(c0, c.m, c.n);
        kernels::gemm<float>(ExecSpace(), c.ta, c.tb, c.alpha, test::to_device(a, ar, ac), test::to_device(b, br, bc),
                             c.beta, out);
        const auto got = test::to_host(out);
        double from_rounded = 0, from_float = 0;  // largest distances
        for (size_t o = 0; o < got.size(); ++o) {
          // The rounded operands' exact product, up to fp32 summation (plus C's rounding).
          EXPECT_NEAR(got[o], exact_rounded[o], (gamma32(c.k + 2) + 0x1p-24) * 1.01 * bound[o] * (1 + 2 * u) + 1e-30)
              << name(f) << " " << name(choice) << " m" << c.m << " n" << c.n << " k" << c.k << " at " << o;
          // And the unrounded product within the format's epsilon.
          EXPECT_NEAR(got[o], exact[o], (2 * u + u * u + gamma32(c.k + 2)) * 1.01 * bound[o] + 1e-30);
          from_rounded = std::max(from_rounded, std::abs(got[o] - exact_rounded[o]));
          from_float = std::max(from_float, std::abs(got[o] - exact[o]));
        }
        // The result is the rounded operands' product, not the float one.
        if (c.k >= 9) EXPECT_GT(from_float, 4 * from_rounded) << name(f) << " " << name(choice) << " m" << c.m << " k" << c.k << ": the operands were not rounded";
      }
    }
}

TEST(ReducedPrecision, GemmBiasAndBatchedAgreeWithGemmOfRoundedOperands) {
  const std::int64_t m = 19, k = 70, n = 23;
  const auto x = host_random(m * k, 21), w = host_random(k * n, 22), bias = host_random(n, 23);
  for (const Format f : {Format::bf16, Format::fp16})
    for (const Forced choice : forced_choices()) {
      Selected sel(choice);
      // Float reference on operands rounded on the host.
      std::vector<float> xr(x), wr(w);
      for (auto& v : xr) v = round_to(f, v);
      for (auto& v : wr) v = round_to(f, v);
      Matrix<float> ref("ref", m, n), got("got", m, n);
      std::vector<float> bias_rows;
      for (std::int64_t i = 0; i < m; ++i) bias_rows.insert(bias_rows.end(), bias.begin(), bias.end());
      {
        const ComputeScope scope(Format::fp32);
        Kokkos::deep_copy(ref, test::to_device(bias_rows, m, n));
        kernels::gemm<float>(ExecSpace(), Op::none, Op::none, 1.0f, test::to_device(xr, m, k), test::to_device(wr, k, n),
                             1.0f, ref);
      }
      {
        const ComputeScope scope(f);
        kernels::gemm_bias<float>(ExecSpace(), test::to_device(x, m, k), test::to_device(w, k, n),
                                  test::to_device(bias, 1, n), got);
      }
      const auto r = test::to_host(ref), g = test::to_host(got);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double abs = std::abs(double(bias[size_t(j)]));
          for (std::int64_t l = 0; l < k; ++l) abs += std::abs(double(xr[size_t(i * k + l)]) * wr[size_t(l * n + j)]);
          EXPECT_NEAR(g[size_t(i * n + j)], r[size_t(i * n + j)], 2 * gamma32(k + 1) * abs) << name(f);
        }
      // Strided-batched: 3 x 2 matrices of (4 x 5) (5 x 6) inside padded buffers.
      const std::int64_t O = 3, I = 2, R = 4, K = 5, C = 6;
      const kernels::Strided sa{R, K, 7, I * R * 7, R * 7}, sb{K, C, 8, I * K * 8, K * 8}, sc{R, C, C, I * R * C, R * C};
      const auto av = host_random(O * I * R * 7, 31), bv = host_random(O * I * K * 8, 32);
      Matrix<float> A = test::to_device(av, 1, std::int64_t(av.size())), B = test::to_device(bv, 1, std::int64_t(bv.size()));
      Matrix<float> Cg("c", 1, O * I * R * C);
      {
        const ComputeScope scope(f);
        kernels::batched_gemm<float>(ExecSpace(), Op::none, Op::none, O, I, 1.0f, A.data(), sa, B.data(), sb, 0.0f,
                                     Cg.data(), sc);
      }
      const auto cg = test::to_host(Cg);
      for (std::int64_t o = 0; o < O; ++o)
        for (std::int64_t i = 0; i < I; ++i)
          for (std::int64_t r = 0; r < R; ++r)
            for (std::int64_t c = 0; c < C; ++c) {
              double s = 0, abs = 0;
              for (std::int64_t l = 0; l < K; ++l) {
                const double p = double(round_to(f, av[size_t(o * sa.outer_stride + i * sa.inner_stride + r * sa.ld + l)])) *
                                 double(round_to(f, bv[size_t(o * sb.outer_stride + i * sb.inner_stride + l * sb.ld + c)]));
                s += p;
                abs += std::abs(p);
              }
              EXPECT_NEAR(cg[size_t(o * sc.outer_stride + i * sc.inner_stride + r * sc.ld + c)], s, gamma32(K) * abs + 1e-30);
            }
    }
}

// Attention forward in bf16 against a double reference of the unrounded
// inputs: Q, K, V and P are rounded (relative error u each); S's error
// |dS| <= (2u + gamma_dh) |Q||K|/sqrt(dh) perturbs P by a factor within
// exp(+-2 max|dS|).
TEST(ReducedPrecision, AttentionForwardWithinBf16Epsilon) {
  const kernels::AttentionShape s{2, 5, 2, 8, true};
  const std::int64_t N = s.samples * s.tokens, d = s.heads * s.head_width, T = s.tokens, dh = s.head_width;
  const auto qkv = host_random(N * 3 * d, 41);
  const double u = unit_roundoff(Format::bf16), scale = 1.0 / std::sqrt(double(dh));
  for (const Forced choice : forced_choices()) {
    Selected sel(choice);
    const ComputeScope scope(Format::bf16);
    Matrix<float> probs("p", s.samples * s.heads * T, T), out("o", N, d);
    kernels::attention_forward<float>(ExecSpace(), s, test::to_device(qkv, N, 3 * d), probs, out);
    const auto o = test::to_host(out);
    bool differs = false;
    for (std::int64_t i = 0; i < s.samples; ++i)
      for (std::int64_t h = 0; h < s.heads; ++h)
        for (std::int64_t t = 0; t < T; ++t) {
          std::vector<double> p(size_t(T), 0.0);
          double top = -1e300, dS = 0;
          for (std::int64_t r = 0; r <= t; ++r) {
            double v = 0, abs = 0;
            for (std::int64_t c = 0; c < dh; ++c) {
              const double q = qkv[size_t((i * T + t) * 3 * d + h * dh + c)], k = qkv[size_t((i * T + r) * 3 * d + d + h * dh + c)];
              v += q * k;
              abs += std::abs(q * k);
            }
            p[size_t(r)] = v * scale;
            top = std::max(top, p[size_t(r)]);
            dS = std::max(dS, (2 * u + u * u + gamma32(dh)) * abs * scale);
          }
          double sum = 0;
          for (std::int64_t r = 0; r <= t; ++r) sum += p[size_t(r)] = std::exp(p[size_t(r)] - top);
          for (std::int64_t c = 0; c < dh; ++c) {
            double ref = 0, abs = 0;
            for (std::int64_t r = 0; r <= t; ++r) {
              const double v = qkv[size_t((i * T + r) * 3 * d + 2 * d + h * dh + c)];
              ref += p[size_t(r)] / sum * v;
              abs += p[size_t(r)] / sum * std::abs(v);
            }
            const double tol = (std::expm1(2 * dS) + 3 * u + gamma32(T + 8)) * 1.05 * abs + 1e-7;
            const double got = o[size_t((i * T + t) * d + h * dh + c)];
            EXPECT_NEAR(got, ref, tol) << name(choice);
            if (std::abs(got - ref) > 1e-6 * abs) differs = true;
          }
        }
    EXPECT_TRUE(differs) << "the attention operands were not rounded";
  }
}

// Convolution in bf16 = the float convolution of rounded x, w (forward),
// dy, w (backward-data), x, dy (backward-weights), up to fp32 summation.
TEST(ReducedPrecision, ConvAgainstFloatOfRoundedOperands) {
  kernels::ConvShape cs;
  cs.channels = 3, cs.height = 7, cs.width = 6, cs.filters = 4, cs.kernel_h = 3, cs.kernel_w = 3;
  cs.stride_h = cs.stride_w = 1, cs.pad_h = cs.pad_w = 1;
  const std::int64_t n = 2;
  const auto x = host_random(n * cs.in_features(), 51), w = host_random(cs.filters * cs.taps(), 52);
  const auto dy = host_random(n * cs.out_features(), 53);
  auto rounded = [](std::vector<float> v) {
    for (auto& e : v) e = float(bf16(e));
    return v;
  };
  for (const auto impl : kernels::available()) {
    kernels::Conv2d<float> conv(cs, impl);
    using Bias = kernels::Conv2d<float>::Bias;
    auto run = [&](Format f, const std::vector<float>& xv, const std::vector<float>& wv, const std::vector<float>& dyv) {
      const ComputeScope scope(f);
      Matrix<float> y("y", n, cs.out_features()), dx("dx", n, cs.in_features()), dw("dw", cs.filters, cs.taps());
      Kokkos::View<float*, MemSpace> saved("saved", size_t(std::max<std::int64_t>(conv.saved_per_sample() * n, 1)));
      Kokkos::View<float*, MemSpace> db("db", size_t(cs.filters));
      const auto X = test::to_device(xv, n, cs.in_features()), W = test::to_device(wv, cs.filters, cs.taps());
      conv.forward(ExecSpace(), X, W, kernels::Conv2d<float>::ConstBias(), y, kernels::Conv2d<float>::Saved(saved.data(), saved.extent(0)));
      conv.backward(ExecSpace(), X, test::to_device(dyv, n, cs.out_features()), W,
                    kernels::Conv2d<float>::Saved(saved.data(), saved.extent(0)), dw, Bias(db.data(), db.extent(0)),
                    false, dx);
      auto out = test::to_host(y);
      for (float v : test::to_host(dx)) out.push_back(v);
      for (float v : test::to_host(dw)) out.push_back(v);
      return out;
    };
    const auto got = run(Format::bf16, x, w, dy);
    const auto ref = run(Format::fp32, rounded(x), rounded(w), rounded(dy));
    const auto plain = run(Format::fp32, x, w, dy);
    ASSERT_EQ(got.size(), ref.size());
    // Each value is a sum of at most n * pixels (<= 84) products of |.| <= 1.
    const double tol = 2 * gamma32(n * cs.pixels()) * double(n * cs.pixels());
    double largest_change = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], tol) << kernels::name(impl) << " at " << i;
      largest_change = std::max(largest_change, std::abs(double(got[i]) - plain[i]));
    }
    EXPECT_GT(largest_change, tol) << "the convolution operands were not rounded";
  }
}

// oneDNN's bf16 convolution (bf16 src/weights/diff_dst in its blocked
// layouts, f32 results) against the portable path on the same bf16 operands
// (rounded into fp32 copies): equal up to fp32 summation order, i.e. within
// 2 gamma_k sum|products| for a reduction of length k (taps for y and dx...,
// n x pixels for dw), for two shapes (stride 2, bias, an accumulating
// weight gradient); its own primitives (3 more for a new format).
TEST(ReducedPrecision, OneDnnBf16ConvAgainstPortable) {
  const auto impls = kernels::available();
  if (std::find(impls.begin(), impls.end(), kernels::Implementation::onednn) == impls.end())
    GTEST_SKIP() << "no oneDNN in this build";
  for (const int stride : {1, 2}) {
    kernels::ConvShape cs;
    cs.channels = 5, cs.height = 9, cs.width = 8, cs.filters = 6, cs.kernel_h = 3, cs.kernel_w = 3;
    cs.stride_h = cs.stride_w = stride, cs.pad_h = cs.pad_w = 1;
    const std::int64_t n = 3;
    const auto x = host_random(n * cs.in_features(), 61 + stride), w = host_random(cs.filters * cs.taps(), 62);
    const auto dy = host_random(n * cs.out_features(), 63), b = host_random(size_t(cs.filters), 64);
    auto run = [&](kernels::Implementation impl) {
      // kernels: onednn, so oneDNN's bf16 primitives run even where `auto`
      // picks the rounded route (no AMX: onednn::bf16_native).
      kernels::select(test::forcing(impl));
      kernels::Conv2d<float> conv(cs, impl);
      using C = kernels::Conv2d<float>;
      const ComputeScope scope(Format::bf16);
      const std::int64_t before = kernels::conv2d_primitives_created();
      Matrix<float> y("y", n, cs.out_features()), dx("dx", n, cs.in_features()), dw("dw", cs.filters, cs.taps());
      Kokkos::View<float*, MemSpace> saved("saved", size_t(std::max<std::int64_t>(conv.saved_per_sample() * n, 1)));
      Kokkos::View<float*, MemSpace> db("db", size_t(cs.filters));
      const auto X = test::to_device(x, n, cs.in_features()), W = test::to_device(w, cs.filters, cs.taps());
      const auto B = test::to_device(b, 1, cs.filters);
      const auto DY = test::to_device(dy, n, cs.out_features());
      const C::Saved sv(saved.data(), saved.extent(0));
      conv.forward(ExecSpace(), X, W, C::ConstBias(B.data(), size_t(cs.filters)), y, sv);
      conv.backward(ExecSpace(), X, DY, W, sv, dw, C::Bias(db.data(), db.extent(0)), false, dx);
      conv.backward_weights(ExecSpace(), X, DY, sv, dw, C::Bias(db.data(), db.extent(0)), true);  // dw = 2 dw
      if (impl == kernels::Implementation::onednn) EXPECT_EQ(kernels::conv2d_primitives_created() - before, 3);
      auto out = test::to_host(y);
      for (float v : test::to_host(dx)) out.push_back(v);
      for (float v : test::to_host(dw)) out.push_back(v);
      for (float v : test::to_host(db)) out.push_back(v);
      return out;
    };
    const auto got = run(kernels::Implementation::onednn), ref = run(kernels::Implementation::portable);
    kernels::select(kernels::Choice::automatic);
    ASSERT_EQ(got.size(), ref.size());
    // |operands| <= 1: a sum of k products is off by at most gamma_k k per
    // order, two orders apart: 2 gamma_k k (k <= n x output pixels, doubled
    // for the accumulated dw).
    const std::int64_t k = 2 * n * cs.out_h() * cs.out_w() + cs.taps();
    const double tol = 2 * gamma32(k) * double(k);
    double largest = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], tol) << "stride " << stride << " at " << i;
      largest = std::max(largest, std::abs(double(got[i]) - ref[i]));
    }
    EXPECT_LT(largest, tol);
  }
}

TEST(ReducedPrecision, FloatFormatLeavesGemmBitwiseUnchanged) {
  const auto a = host_random(9 * 33, 61), b = host_random(33 * 5, 62);
  std::vector<float> before, after;
  for (int pass = 0; pass < 2; ++pass) {
    const ComputeScope scope(pass == 0 ? Format::fp32 : Format::fp64);
    Matrix<float> c("c", 9, 5);
    kernels::gemm<float>(ExecSpace(), Op::none, Op::none, 1.0f, test::to_device(a, 9, 33), test::to_device(b, 33, 5), 0.0f, c);
    (pass == 0 ? before : after) = test::to_host(c);
  }
  EXPECT_EQ(before, after);
}

// The weight copy (kernels::WeightCopy): an operand inside the registered
// parameters is read from the copy (bitwise the per-call conversion or
// rounding), and only a refresh picks up new weights. Both routes: the
// bf16 copy of oneDNN's bf16 primitives (kernels: onednn) and the rounded
// fp32 copy of the rounded route (kernels: portable; also what `auto`
// picks for bf16 on an Intel CPU without AMX), for the gemm and for conv2d.
TEST(ReducedPrecision, WeightCopyIsTheConversionUntilRefreshed) {
  std::vector<std::pair<kernels::Choice, Format>> cases{{kernels::Choice::portable, Format::bf16},
                                                        {kernels::Choice::portable, Format::fp16},
                                                        {kernels::Choice::automatic, Format::bf16}};
  for (auto i : kernels::available())
    if (i == kernels::Implementation::onednn) cases.push_back({kernels::Choice::onednn, Format::bf16});
  for (const auto& [choice, format] : cases) {
    SCOPED_TRACE(std::string(kernels::name(choice)) + " " + name(format));
    kernels::select(choice);
    const ComputeScope scope(format);
    const std::int64_t m = 7, k = 40, n = 9;
    const auto x = host_random(m * k, 71);
    auto params = host_random(5 + k * n, 72);  // the weight at offset 5 of a parameter vector
    Matrix<float> P = test::to_device(params, 1, std::int64_t(params.size()));
    const ConstMatrix<float> W(P.data() + 5, size_t(k), size_t(n)), X = test::to_device(x, m, k);
    // A 3x3 convolution of a 2 x 5 x 4 image to 4 filters: its 72 weights
    // at offset 5 too (the same parameter vector), as Conv2d reads them.
    const kernels::ConvShape cs{2, 5, 4, 4, 3, 3, 1, 1, 1, 1};
    kernels::Conv2d<float> conv(cs, kernels::implementation(kernels::Primitive::conv2d, 4));
    const ConstMatrix<float> CW(P.data() + 5, size_t(cs.filters), size_t(cs.taps()));
    const ConstMatrix<float> CX = test::to_device(host_random(3 * cs.in_features(), 73), 3, cs.in_features());
    auto product = [&] {
      Matrix<float> c("c", m, n);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::none, 1.0f, X, W, 0.0f, c);
      Matrix<float> y("y", 3, size_t(cs.out_features()));
      Vector<float> saved("saved", size_t(3 * conv.saved_per_sample()));
      conv.forward(ExecSpace(), CX, CW, kernels::Conv2d<float>::ConstBias(), y,
                   kernels::Conv2d<float>::Saved(saved.data(), saved.extent(0)));
      auto out = test::to_host(c);
      const auto yv = test::to_host(y);
      out.insert(out.end(), yv.begin(), yv.end());
      return out;
    };
    const auto plain = product();
    {
      kernels::WeightCopy copy;
      copy.refresh(ExecSpace(), P.data(), std::int64_t(params.size()));
      EXPECT_EQ(product(), plain);
      for (auto& v : params) v = -v;  // new weights, not refreshed: the copy still holds the old ones
      Kokkos::deep_copy(P, test::to_device(params, 1, std::int64_t(params.size())));
      const auto stale = product();
      // oneDNN's bf16 convolution converts its weights in its own reorders
      // (conv_onednn.cpp), so only the GEMM reads the bf16 copy there.
      const size_t copied = format == Format::bf16 && kernels::implementation(kernels::Primitive::conv2d, 2) ==
                                                          kernels::Implementation::onednn
                                ? size_t(m * n)
                                : plain.size();
      for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(stale[i], i < copied ? plain[i] : -plain[i]) << i;
      copy.refresh(ExecSpace(), P.data(), std::int64_t(params.size()));
      const auto negated = product();
      for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(negated[i], -plain[i]) << i;
    }
    for (auto& v : params) v = -v;  // unregistered (the copy's destructor): converted per call again
    Kokkos::deep_copy(P, test::to_device(params, 1, std::int64_t(params.size())));
    for (auto& v : params) v = -v;
    Kokkos::deep_copy(P, test::to_device(params, 1, std::int64_t(params.size())));
    const auto again = product();
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(again[i], -plain[i]) << i;
  }
  kernels::select(kernels::Choice::automatic);
}

// bf16 parameter operands in a FrozenWeights scope (gemm.hpp; oneDNN's
// bf16 primitives): W's part of the registered bf16 weight copy is packed
// into the matmul's blocked layout once per scope and form, at its first
// use. Every product (X W + b, dY W^T, alpha A^T W + beta C) is the plain
// bf16 product outside a scope up to fp32 summation order (bitwise below
// 256 rows; not at 256 x 1024 x 1024, measured), repeatable bitwise, for W
// at an odd offset of the parameters and the deep MLP's shapes; a
// refreshed copy in the next scope gives the new weights' products.
TEST(ReducedPrecision, PackedBf16WeightsBitwisePlain) {
  const auto impls = kernels::available();
  if (std::find(impls.begin(), impls.end(), kernels::Implementation::onednn) == impls.end())
    GTEST_SKIP() << "no oneDNN in this build";
  if (!kernels::has(kernels::Implementation::onednn, kernels::Primitive::gemm, 2))
    GTEST_SKIP() << "oneDNN has no bf16 primitives on this CPU (below AVX-512)";
  Selected sel({Choice::onednn, kernels::Bf16Route::native});
  const ComputeScope format(Format::bf16);
  for (const auto& s : std::vector<std::array<std::int64_t, 3>>{
           {1, 1, 1}, {1, 7, 5}, {13, 1, 9}, {33, 17, 65}, {32, 1024, 1024}, {32, 1024, 784}, {32, 10, 1024},
           {256, 1024, 1024}, {2, 48, 64}}) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    SCOPED_TRACE(fmt::format("m {} n {} k {}", m, n, k));
    auto params = host_random(5 + k * n, 81);
    Matrix<float> P = test::to_device(params, 1, std::int64_t(params.size()));
    const ConstMatrix<float> W(P.data() + 5, size_t(k), size_t(n));
    const auto X = test::to_device(host_random(m * k, 82), m, k), bias = test::to_device(host_random(n, 83), 1, n);
    const auto dY = test::to_device(host_random(m * n, 84), m, n), At = test::to_device(host_random(k * m, 85), k, m);
    const auto z0 = host_random(m * n, 86);
    auto products = [&] {
      Matrix<float> y("y", m, n), dx("dx", m, k);
      Matrix<float> z = test::to_device(z0, m, n);
      Kokkos::deep_copy(y, std::numeric_limits<float>::quiet_NaN());
      Kokkos::deep_copy(dx, std::numeric_limits<float>::quiet_NaN());
      kernels::gemm_bias_weights<float>(ExecSpace(), X, W, bias, y);
      kernels::gemm_weights<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dY, W, 0.0f, dx);
      kernels::gemm_weights<float>(ExecSpace(), Op::transpose, Op::none, 0.7f, At, W, 1.3f, z);
      auto out = test::to_host(y);
      for (float v : test::to_host(dx)) out.push_back(v);
      for (float v : test::to_host(z)) out.push_back(v);
      return out;
    };
    const auto per_call = products();  // no copy registered: converted per call
    kernels::WeightCopy copy;
    copy.refresh(ExecSpace(), P.data(), std::int64_t(params.size()));
    const auto plain = products();  // the copy, outside a scope: the plain bf16 primitives
    ASSERT_EQ(plain, per_call);
    // Bound sums S = sum |a||b| (+ |bias|, |beta C|) of every output, from
    // the float products of the absolute values.
    std::vector<float> bound;
    {
      const ComputeScope f32(Format::fp32);
      auto abs_of = [](const Matrix<float>& m) {
        auto h = test::to_host(m);
        for (auto& v : h) v = std::abs(v);
        return test::to_device(h, std::int64_t(m.extent(0)), std::int64_t(m.extent(1)));
      };
      const auto aW = abs_of(Matrix<float>(P.data() + 5, size_t(k), size_t(n)));
      Matrix<float> y("y", m, n), dx("dx", m, k);
      auto az0 = z0;
      for (auto& v : az0) v = std::abs(v);
      Matrix<float> z = test::to_device(az0, m, n);
      kernels::gemm_bias<float>(ExecSpace(), abs_of(Matrix<float>(const_cast<float*>(X.data()), size_t(m), size_t(k))), aW,
                                abs_of(Matrix<float>(const_cast<float*>(bias.data()), 1, size_t(n))), y);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f,
                           abs_of(Matrix<float>(const_cast<float*>(dY.data()), size_t(m), size_t(n))), aW, 0.0f, dx);
      kernels::gemm<float>(ExecSpace(), Op::transpose, Op::none, 0.7f,
                           abs_of(Matrix<float>(const_cast<float*>(At.data()), size_t(k), size_t(m))), aW, 1.3f, z);
      bound = test::to_host(y);
      for (float v : test::to_host(dx)) bound.push_back(v);
      for (float v : test::to_host(z)) bound.push_back(v);
    }
    {
      const kernels::FrozenWeights frozen;
      const auto first = products();
      // The packed primitive may sum in another order than the plain one
      // (it does at 256 x 1024 x 1024 on AMX): both are the rounded
      // operands' exact products summed in fp32, so they lie within twice
      // gamma_k S of each other; repeated products are bitwise equal.
      ASSERT_EQ(first.size(), plain.size());
      for (size_t o = 0; o < plain.size(); ++o)
        ASSERT_NEAR(first[o], plain[o], 2 * gamma32(k + 2) * 1.01 * 1.02 * double(bound[o]) + 1e-30) << o;
      for (int use = 0; use < 3; ++use) ASSERT_EQ(products(), first) << "use " << use;
      // Only the forward form is packed: dY W^T reads the plain bf16 copy
      // (packing the transposed form cost more than it saved; perf/README.md,
      // "Issue 22: conversions through oneDNN").
      EXPECT_GE(kernels::FrozenWeights::packed_bytes(), k * n * std::int64_t(sizeof(bf16)))
          << "W packed in its forward form";
    }
    for (auto& v : params) v = 0.5f - v;  // an optimizer step: new weights at the same address
    Kokkos::deep_copy(P, test::to_device(params, 1, std::int64_t(params.size())));
    copy.refresh(ExecSpace(), P.data(), std::int64_t(params.size()));
    const auto updated = products();
    ASSERT_NE(updated, plain);
    {
      const kernels::FrozenWeights frozen;
      const auto first = products();
      for (size_t o = 0; o < updated.size(); ++o)
        ASSERT_NEAR(first[o], updated[o], 2 * gamma32(k + 2) * 1.01 * 1.02 * double(bound[o]) + 1e-30) << o;
      for (int use = 0; use < 2; ++use) ASSERT_EQ(products(), first) << "updated W, use " << use;
    }
    if (m < 256) {  // measured bitwise here (AMX, oneDNN 2.6.3): the packed copy changes nothing
      const kernels::FrozenWeights frozen;
      EXPECT_EQ(products(), updated);
    }
  }
}

// Layer families through the seam (Dense, Conv2d, Conv1d): bf16 / fp16
// forward and gradients against float. The layers are linear in each
// operand, so running the float layer on |x|, |params|, |dy| gives the
// exact bound sums S = sum |a||b| of every output, input gradient and
// parameter gradient; each bf16 value must lie within (2u + u^2 + gamma_k) S
// of the float one, plus the float result's own gamma_k S.
struct FloatLayer {
  std::unique_ptr<Layer<float>> layer;
  Vector<float> params, grads;
  std::int64_t rows;
  FloatLayer(const std::string& yaml, const Shape& in, std::int64_t n) : rows(n) {
    layer = make_layer<float>(layer_shape(parse_layer(yaml), in));
    params = Vector<float>("p", layer->parameter_count());
    grads = Vector<float>("g", layer->parameter_count());
    layer->bind(params.data(), grads.data());
    layer->initialize(5);
  }
  // y, dx, parameter gradients for x, dy at `format`, params `p`.
  std::vector<float> run(Format format, const std::vector<float>& p, const std::vector<float>& x,
                         const std::vector<float>& dy) {
    const ComputeScope scope(format);
    {
      auto h = Kokkos::create_mirror_view(params);
      for (size_t i = 0; i < p.size(); ++i) h(i) = p[i];
      Kokkos::deep_copy(params, h);
    }
    Kokkos::deep_copy(grads, 0.0f);
    Matrix<float> y("y", rows, layer->out_features()), dx("dx", rows, layer->in_features());
    Vector<float> saved("saved", size_t(std::max<std::int64_t>(layer->saved_size().elements(rows), 1)));
    const auto X = test::to_device(x, rows, layer->in_features());
    const PassContext ctx{11, 3, 5, true};
    layer->forward(ctx, X, y, SavedView<float>(saved.data(), saved.extent(0)));
    layer->backward(ctx, X, test::to_device(dy, rows, layer->out_features()), dx,
                    SavedView<float>(saved.data(), saved.extent(0)));
    auto out = test::to_host(y);
    for (float v : test::to_host(dx)) out.push_back(v);
    for (float v : test::to_host(grads)) out.push_back(v);
    return out;
  }
};

TEST(ReducedPrecision, LayerFamiliesForwardAndGradientsAgainstFloat) {
  struct Case {
    const char* yaml;
    Shape in;
    std::int64_t k;  // longest reduction (terms per output or gradient)
  };
  const std::int64_t n = 3;
  const Case cases[] = {{"{type: dense, units: 7}", {40}, 40},
                        {"{type: conv2d, filters: 4, kernel: 3, padding: same}", {2, 6, 5}, n * 30},
                        {"{type: conv1d, filters: 3, kernel: 5}", {2, 16}, n * 12}};
  for (const Case& c : cases)
    for (const Format f : {Format::bf16, Format::fp16})
      for (const Forced choice : forced_choices()) {
        Selected sel(choice);
        FloatLayer L(c.yaml, c.in, n);
        const auto p = host_random(L.layer->parameter_count(), 81);
        const auto x = host_random(n * L.layer->in_features(), 82), dy = host_random(n * L.layer->out_features(), 83);
        auto abs = [](std::vector<float> v) {
          for (auto& e : v) e = std::abs(e);
          return v;
        };
        const auto ref = L.run(Format::fp32, p, x, dy), got = L.run(f, p, x, dy);
        const auto bound = L.run(Format::fp32, abs(p), abs(x), abs(dy));
        const double u = unit_roundoff(f), tol = (2 * u + u * u + 2 * gamma32(c.k + 1)) * 1.01;
        ASSERT_EQ(got.size(), ref.size());
        double largest = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i], ref[i], tol * bound[i] + 1e-30) << c.yaml << " " << name(f) << " at " << i;
          largest = std::max(largest, std::abs(double(got[i]) - ref[i]));
        }
        EXPECT_GT(largest, 0.0) << c.yaml << ": " << name(f) << " changed nothing";
      }
}

// Activations are fp32 work under every policy (only the heavy
// primitives' operands are rounded): the GELU layer's forward and backward
// under bf16 / fp16 are bitwise its float results, per implementation (the
// oneDNN JIT eltwise too, where before a reduced format fell back to the
// layer's scalar loop).
TEST(ReducedPrecision, ActivationsUnderAReducedFormatAreTheFloatPath) {
  const std::int64_t n = 5;
  for (const Forced choice : forced_choices()) {
    Selected sel(choice);
    FloatLayer L("{type: gelu}", {37}, n);
    const auto x = host_random(n * 37, 84), dy = host_random(n * 37, 85);
    std::vector<float> wide(x);
    for (auto& v : wide) v *= 6;  // the GELU's curved range and both tails
    const auto ref = L.run(Format::fp32, {}, wide, dy);
    for (const Format f : {Format::bf16, Format::fp16}) EXPECT_EQ(L.run(f, {}, wide, dy), ref) << name(choice) << " " << name(f);
  }
}

// Dense::backward holds an OperandReuse scope (gemm.hpp): dY converted to
// bf16 once for both products. Bitwise the two halves called apart (no
// scope: dY converted per product), per implementation and route, with no
// registered weight copy (so W is converted per call too and must not
// overwrite the held dY), and a scope around a whole layer's backward
// changes nothing either.
TEST(ReducedPrecision, DenseBackwardReusesItsConvertedDy) {
  const std::int64_t n = 6, in = 33, out = 17;
  const auto x = host_random(n * in, 91), dy = host_random(n * out, 92);
  for (const Forced choice : forced_choices()) {
    Selected sel(choice);
    FloatLayer L("{type: dense, units: 17}", {in}, n);
    const ComputeScope scope(Format::bf16);
    const ExecSpace space;
    const auto X = test::to_device(x, n, in), DY = test::to_device(dy, n, out);
    const PassContext ctx{11, 3, 5, true};
    const auto run = [&](int how) {
      Kokkos::deep_copy(L.grads, 0.0f);
      Matrix<float> dx("dx", n, in);
      if (how == 0) {
        L.layer->backward(ctx, X, DY, dx, SavedView<float>());
      } else if (how == 1) {
        L.layer->backward_weights(ctx, X, DY, SavedView<float>());
        L.layer->backward_input(ctx, X, DY, dx, SavedView<float>());
      } else {
        const kernels::OperandReuse outer;
        L.layer->backward(ctx, X, DY, dx, SavedView<float>());
        L.layer->backward(ctx, X, DY, dx, SavedView<float>());  // accumulates: the copies of the first are reused
      }
      auto got = test::to_host(dx);
      for (float v : test::to_host(L.grads)) got.push_back(v);
      return got;
    };
    const auto apart = run(1), together = run(0);
    EXPECT_EQ(together, apart) << name(choice);
    const auto twice = run(2);
    ASSERT_EQ(twice.size(), apart.size());
    for (size_t i = 0; i < size_t(n * in); ++i) EXPECT_EQ(twice[i], apart[i]) << name(choice) << " dx " << i;
    for (size_t i = size_t(n * in); i < twice.size(); ++i)
      EXPECT_EQ(twice[i], 2 * apart[i]) << name(choice) << " gradient " << i;  // x + x is exact
  }
}

// The attention in bf16 is its five GEMMs through the public batched_gemm
// (bf16 operands, fp32 results) around an fp32 softmax: out = P V,
// dV = P^T dO, dQ = dS K / sqrt(dh), dK = dS^T Q / sqrt(dh), bitwise, with
// P and dS as the attention returns them (probs, work). On the native route
// the attention converts qkv, dO, P^T and dS^T once per call into the
// layouts oneDNN's brgemm takes (head-major, transposes stored transposed,
// head-major results scattered after; dispatch.cpp, to_heads), so there the
// reference GEMMs read head-major float copies of Q, K, V, dO and host
// transposes of P, dS and write head-major results (the same bf16 values
// after the public GEMM's own conversion, the same oneDNN primitive);
// elsewhere the interleaved qkv. P and dS themselves against double softmaxes of
// S = Q K^T / sqrt(dh) and dP = dO V^T from the same public GEMMs, within a
// few fp32 roundings per row of T terms.
TEST(ReducedPrecision, AttentionIsItsGemmsThroughTheSeam) {
  for (const bool causal : {false, true}) {
    const kernels::AttentionShape s{3, 6, 2, 8, causal};
    const std::int64_t N = s.samples * s.tokens, d = s.heads * s.head_width, T = s.tokens, n = s.samples, H = s.heads;
    const std::int64_t P = n * H * T;
    const float scale = 1.0f / float(std::sqrt(double(s.head_width)));
    const kernels::Strided sq{T, s.head_width, 3 * d, T * 3 * d, s.head_width}, so{T, s.head_width, d, T * d, s.head_width},
        sp{T, T, T, H * T * T, T * T};
    auto qkv_h = host_random(N * 3 * d, 51);
    for (auto& v : qkv_h) v *= 3;  // scores of a few units: P far from uniform
    const auto dout_h = host_random(N * d, 52);
    for (const Forced choice : forced_choices()) {
      Selected sel(choice);
      const ComputeScope scope(Format::bf16);
      const ExecSpace space;
      const Matrix<float> qkv = test::to_device(qkv_h, N, 3 * d), dout = test::to_device(dout_h, N, d);
      Matrix<float> probs("p", P, T), out("o", N, d), work("w", P, T), dqkv("dqkv", N, 3 * d);
      kernels::attention_forward<float>(space, s, qkv, probs, out);
      kernels::attention_backward<float>(space, s, qkv, probs, dout, work, dqkv);
      const bool native = kernels::implementation(kernels::Primitive::batched_gemm, 2) == kernels::Implementation::onednn;
      // Head-major copies: [Q | K | V] each (n, H, T, dh), dO (n, H, T, dh).
      const std::int64_t dh = s.head_width;
      std::vector<float> heads_h(size_t(3 * N * d)), dout_heads_h(size_t(N * d));
      for (std::int64_t part = 0; part < 3; ++part)
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t t = 0; t < T; ++t)
              for (std::int64_t c = 0; c < dh; ++c) {
                const size_t to = size_t((((part * n + i) * H + h) * T + t) * dh + c);
                heads_h[to] = qkv_h[size_t((i * T + t) * 3 * d + part * d + h * dh + c)];
                if (part == 0) dout_heads_h[to] = dout_h[size_t((i * T + t) * d + h * dh + c)];
              }
      const Matrix<float> heads = test::to_device(heads_h, 3, N * d), dout_heads = test::to_device(dout_heads_h, N, d);
      const kernels::Strided hm{T, dh, dh, H * T * dh, T * dh}, sin = native ? hm : sq, sdo = native ? hm : so;
      const float *q = native ? heads.data() : qkv.data(), *k = native ? q + N * d : q + d,
                  *v = native ? q + 2 * N * d : q + 2 * d, *dO = native ? dout_heads.data() : dout.data();
      const auto gemm = [&](Op ta, Op tb, float alpha, const float* a, const kernels::Strided& sa, const float* b,
                            const kernels::Strided& sb, const kernels::Strided& sc, std::int64_t rows, std::int64_t cols,
                            std::int64_t offset) {
        Matrix<float> c("c", rows, cols);
        Kokkos::deep_copy(c, 0.0f);
        kernels::batched_gemm<float>(space, ta, tb, n, H, alpha, a, sa, b, sb, 0.0f, c.data() + offset, sc);
        return test::to_host(c);
      };
      const auto o = test::to_host(out), dq3 = test::to_host(dqkv), p = test::to_host(probs), ds = test::to_host(work);
      // Native: the head-major results of P V, P^T dO, dS K, dS^T Q with the
      // transposed sources given as stored transposed (brgemm's layouts).
      const auto transposed = [&](const std::vector<float>& m) {
        std::vector<float> t(m.size());
        for (std::int64_t blk = 0; blk < n * H; ++blk)
          for (std::int64_t r = 0; r < T; ++r)
            for (std::int64_t c = 0; c < T; ++c) t[size_t((blk * T + c) * T + r)] = m[size_t((blk * T + r) * T + c)];
        return t;
      };
      const Matrix<float> pt = test::to_device(transposed(p), P, T), dst = test::to_device(transposed(ds), P, T);
      std::vector<float> ro, rdv, rdq, rdk;
      if (native) {
        ro = gemm(Op::none, Op::none, 1.0f, probs.data(), sp, v, hm, hm, N, d, 0);
        rdv = gemm(Op::none, Op::none, 1.0f, pt.data(), sp, dO, hm, hm, N, d, 0);
        rdq = gemm(Op::none, Op::none, scale, work.data(), sp, k, hm, hm, N, d, 0);
        rdk = gemm(Op::none, Op::none, scale, dst.data(), sp, q, hm, hm, N, d, 0);
      } else {
        ro = gemm(Op::none, Op::none, 1.0f, probs.data(), sp, v, sq, so, N, d, 0);
        rdv = gemm(Op::transpose, Op::none, 1.0f, probs.data(), sp, dO, so, sq, N, 3 * d, 2 * d);
        rdq = gemm(Op::none, Op::none, scale, work.data(), sp, k, sq, sq, N, 3 * d, 0);
        rdk = gemm(Op::transpose, Op::none, scale, work.data(), sp, q, sq, sq, N, 3 * d, d);
      }
      for (std::int64_t r = 0; r < N; ++r)
        for (std::int64_t c = 0; c < d; ++c) {
          const size_t at = size_t(r * 3 * d + c);
          const size_t hmi = size_t((((r / T) * H + c / dh) * T + r % T) * dh + c % dh);
          EXPECT_EQ(o[size_t(r * d + c)], native ? ro[hmi] : ro[size_t(r * d + c)]) << name(choice) << " O " << r << "," << c;
          EXPECT_EQ(dq3[at], native ? rdq[hmi] : rdq[at]) << name(choice) << " dQ " << r << "," << c;
          EXPECT_EQ(dq3[at + size_t(d)], native ? rdk[hmi] : rdk[at + size_t(d)]) << name(choice) << " dK " << r << "," << c;
          EXPECT_EQ(dq3[at + size_t(2 * d)], native ? rdv[hmi] : rdv[at + size_t(2 * d)]) << name(choice) << " dV " << r << "," << c;
        }
      // The softmax pair (fp32) on the GEMMs' S and dP.
      const auto S = gemm(Op::none, Op::transpose, scale, q, sin, k, sin, sp, P, T, 0);
      const auto dP = gemm(Op::none, Op::transpose, 1.0f, dO, sdo, v, sin, sp, P, T, 0);
      const double tol = 4 * gamma32(T + 4);
      for (std::int64_t r = 0; r < P; ++r) {
        const std::int64_t last = causal ? r % T : T - 1;
        double top = -1e300, sum = 0, dot = 0;
        for (std::int64_t c = 0; c <= last; ++c) top = std::max(top, double(S[size_t(r * T + c)]));
        for (std::int64_t c = 0; c <= last; ++c) sum += std::exp(double(S[size_t(r * T + c)]) - top);
        for (std::int64_t c = 0; c <= last; ++c) dot += double(p[size_t(r * T + c)]) * dP[size_t(r * T + c)];
        for (std::int64_t c = 0; c < T; ++c) {
          const size_t at = size_t(r * T + c);
          const double ref = c <= last ? std::exp(double(S[at]) - top) / sum : 0.0;
          EXPECT_NEAR(p[at], ref, tol * (ref + 1e-3)) << name(choice) << " P " << r << "," << c;
          const double dref = c <= last ? double(p[at]) * (double(dP[at]) - dot) : 0.0;
          double bound = 0;
          for (std::int64_t e = 0; e <= last; ++e) bound += std::abs(double(p[size_t(r * T + e)]) * dP[size_t(r * T + e)]);
          EXPECT_NEAR(ds[at], dref, tol * double(p[at]) * (std::abs(double(dP[at])) + bound) + 1e-30)
              << name(choice) << " dS " << r << "," << c;
        }
      }
    }
  }
}

// The seam's fp32 <-> bf16 conversions (convert.hpp) under every
// implementation and route: known bit patterns (ties to even, carry into
// the exponent, overflow to inf, NaN quieted with its payload's top bits,
// signed zero); subnormals kept by the portable loop and, where oneDNN
// converts, either kept or flushed to a zero of their sign (AVX512_BF16's
// vcvtneps2bf16 treats them as zero), the same way for every one; bf16 ->
// fp32 exact; round_to_bf16 bitwise to_bf16 then from_bf16 across its
// 65536-value chunks.
TEST(ReducedPrecision, ConvertsThroughTheSeamBitwise) {
  struct Case {
    std::uint32_t in;
    std::uint16_t want;
  };
  const std::vector<Case> known = {
      {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80},  // 1 + 2^-8: a tie, to even (down)
      {0x3f818000u, 0x3f82},                         // a tie, to even (up)
      {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80}, {0xbfc00000u, 0xbfc0},
      {0x3fffffffu, 0x4000},                         // carries into the exponent
      {0x7f7fffffu, 0x7f80},                         // FLT_MAX rounds to inf
      {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},  // infinities kept
      {0x7fa00000u, 0x7fe0}, {0xffc00001u, 0xffc0},  // NaN quieted, top payload bits kept
      {0x00000000u, 0x0000}, {0x80000000u, 0x8000},  // signed zero
      {0x00800000u, 0x0080}, {0x80800000u, 0x8080},  // smallest normal
  };
  const std::vector<std::uint32_t> subnormal = {0x00400000u, 0x80400000u, 0x00000001u, 0x007fffffu};
  const std::int64_t n = 65536 * 2 + 1000;  // crosses round_to_bf16's chunks
  std::vector<float> v(static_cast<size_t>(n));
  const auto random = host_random(n, 91);
  for (std::int64_t i = 0; i < n; ++i) v[size_t(i)] = random[size_t(i)] * std::ldexp(1.0f, int(i % 61) - 30);
  for (size_t i = 0; i < known.size(); ++i) std::memcpy(&v[i], &known[i].in, 4);
  for (size_t i = 0; i < subnormal.size(); ++i) std::memcpy(&v[known.size() + i], &subnormal[i], 4);
  for (size_t i = 0; i < known.size(); ++i) std::memcpy(&v[size_t(n) - 1 - i], &known[i].in, 4);  // in the last chunk too
  const Matrix<float> src = test::to_device(v, 1, n);

  for (const auto& f : forced_choices()) {
    const Selected selected(f);
    const ComputeScope scope(Format::bf16);
    SCOPED_TRACE(name(f));
    Kokkos::View<bf16*, MemSpace> h16("h16", size_t(n));
    Matrix<float> back("back", 1, n), rounded("rounded", 1, n);
    Kokkos::deep_copy(rounded, src);
    kernels::to_bf16(ExecSpace(), src.data(), n, h16.data());
    kernels::from_bf16(ExecSpace(), h16.data(), n, back.data());
    kernels::round_to_bf16(ExecSpace(), rounded.data(), n);
    ExecSpace().fence();
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), h16);
    const auto b = test::to_host(back), r = test::to_host(rounded);

    for (size_t i = 0; i < known.size(); ++i) {
      EXPECT_EQ(hb(i).bits, known[i].want) << fmt::format("input {:#010x}", known[i].in);
      EXPECT_EQ(hb(size_t(n) - 1 - i).bits, known[i].want) << fmt::format("input {:#010x} (last chunk)", known[i].in);
    }
    bool flushed = false;
    for (size_t i = 0; i < subnormal.size(); ++i) {
      const std::uint16_t got = hb(known.size() + i).bits, kept = bf16(v[known.size() + i]).bits;
      const std::uint16_t zero = std::uint16_t((subnormal[i] >> 16) & 0x8000u);
      if (!kernels::onednn_converts()) {
        EXPECT_EQ(got, kept) << fmt::format("subnormal {:#010x} kept by the portable loop", subnormal[i]);
      } else {
        if (i == 0) flushed = got == zero && kept != zero;
        EXPECT_EQ(got, flushed ? zero : kept) << fmt::format("subnormal {:#010x}, flushed {}", subnormal[i], flushed);
      }
    }
    // Every other value: the portable rounding (normal values round the same
    // way on both); bf16 -> fp32 exact; round_to_bf16 is the round trip.
    std::int64_t mismatches = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const size_t u = size_t(i);
      const bool is_subnormal = u >= known.size() && u < known.size() + subnormal.size();
      if (!is_subnormal && hb(u).bits != bf16(v[u]).bits) ++mismatches;
      std::uint32_t back_bits, r_bits, want_bits = std::uint32_t(hb(u).bits) << 16;
      std::memcpy(&back_bits, &b[u], 4);
      std::memcpy(&r_bits, &r[u], 4);
      if (back_bits != want_bits || r_bits != want_bits) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(WireFormat, PackUnpackRoundsToNearestEven) {
  const std::vector<float> v = {1.0f, 1.00390625f, 1.01171875f, -3.5f, 65504.0f, 65520.0f, 1e-8f, 3.0e38f};
  const Matrix<float> src = test::to_device(v, 1, std::int64_t(v.size()));
  for (const Format f : {Format::bf16, Format::fp16}) {
    Kokkos::View<std::uint16_t*, MemSpace> bits("bits", v.size());
    Matrix<float> back("back", 1, std::int64_t(v.size()));
    pack_wire(ExecSpace(), f, src.data(), std::int64_t(v.size()), bits.data());
    unpack_wire(ExecSpace(), f, bits.data(), std::int64_t(v.size()), back.data());
    const auto b = test::to_host(back);
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = round_to(f, v[i]);
      if (std::isinf(want)) EXPECT_TRUE(std::isinf(b[i]) && b[i] > 0);
      else EXPECT_EQ(b[i], want) << name(f) << " " << v[i];
    }
  }
  // Known values: 1 + 2^-8 is a tie in bf16 (to even: 1); 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  Kokkos::View<std::uint16_t*, MemSpace> bits("bits", v.size());
  pack_wire(ExecSpace(), Format::bf16, src.data(), 3, bits.data());
  const auto h = test::to_host(bits);
  EXPECT_EQ(h[0], 0x3f80);
  EXPECT_EQ(h[1], 0x3f80);
  EXPECT_EQ(h[2], 0x3f82);
  EXPECT_EQ(sizeof(std::uint16_t) * bits.extent(0), 2 * v.size());
  EXPECT_THROW(pack_wire(ExecSpace(), Format::fp32, src.data(), 1, bits.data()), std::invalid_argument);
}

// round_and_pack_wire (the forward's fused pass with 16-bit storage) is
// bitwise round_activations then pack_wire: ties, overflow, subnormals,
// signed zero, inf and NaN (quieted), for bf16 and fp16.
TEST(WireFormat, RoundAndPackIsRoundThenPack) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {1.0f,    1.00390625f, 1.01171875f, -3.5f, 65504.0f, 65520.0f, 1e-8f, 3.0e38f, 3.4e38f,
                          -0.0f,   inf,         -inf,        nan,   1e-40f,   -6e-8f,   2.5e-5f};
  std::uint32_t signalling = 0x7f800001u;  // a signalling NaN: bf16 keeps its payload, sets the quiet bit
  float snan;
  std::memcpy(&snan, &signalling, sizeof snan);
  v.push_back(snan);
  for (const auto x : host_random(200, 91)) v.push_back(x * 1e3f);
  const auto n = std::int64_t(v.size());
  for (const Format f : {Format::bf16, Format::fp16}) {
    Matrix<float> a = test::to_device(v, 1, n), b = test::to_device(v, 1, n);
    Kokkos::View<std::uint16_t*, MemSpace> pa("pa", v.size()), pb("pb", v.size());
    round_activations(ExecSpace(), f, a.data(), n);
    pack_wire(ExecSpace(), f, a.data(), n, pa.data());
    round_and_pack_wire(ExecSpace(), f, b.data(), n, pb.data());
    EXPECT_EQ(test::to_host(pa), test::to_host(pb)) << name(f);
    const auto ra = test::to_host(a), rb = test::to_host(b);
    for (size_t i = 0; i < v.size(); ++i) {
      std::uint32_t x, y;
      std::memcpy(&x, &ra[i], 4);
      std::memcpy(&y, &rb[i], 4);
      EXPECT_EQ(x, y) << name(f) << " at " << i << " (" << v[i] << ")";
    }
  }
  const auto h = test::to_host([&] {
    Matrix<float> a = test::to_device(v, 1, n);
    Kokkos::View<std::uint16_t*, MemSpace> p("p", v.size());
    round_and_pack_wire(ExecSpace(), Format::bf16, a.data(), n, p.data());
    return p;
  }());
  EXPECT_EQ(h[0], 0x3f80);   // 1
  EXPECT_EQ(h[1], 0x3f80);   // a tie: to even
  EXPECT_EQ(h[2], 0x3f82);   // 1 + 3 * 2^-8 up to 1 + 2^-6
  EXPECT_EQ(h[8], 0x7f80);   // 3.4e38 rounds past the largest bf16: +inf
  EXPECT_EQ(h[9], 0x8000);   // -0
  EXPECT_EQ(h[12] & 0x7fc0, 0x7fc0);  // NaN stays a quiet NaN
  EXPECT_EQ(h[16], 0x7fc0);  // the signalling NaN quieted
  Matrix<float> a = test::to_device(v, 1, 1);
  Kokkos::View<std::uint16_t*, MemSpace> p("p", 1);
  EXPECT_THROW(round_and_pack_wire(ExecSpace(), Format::fp32, a.data(), 1, p.data()), std::invalid_argument);
}

// A boundary buffer with 16-bit storage holds its values in 2 bytes each
// and nothing else: no float buffer, store/load round-trips 16-bit values
// exactly, and only a 16-bit format on a float buffer is accepted.
TEST(SixteenBitStorage, BoundaryBufferHoldsTwoBytesAValue) {
  const std::vector<float> v = {1.0f, -2.5f, 0.1f, 3.0e4f, 1e-3f, 7.0f};  // 2 rows x 3
  for (const Format f : {Format::bf16, Format::fp16}) {
    BoundaryBuffer<float> b("gpipe::test::boundary", 4, 3);
    EXPECT_EQ(b.bytes(), 4 * 3 * 4);
    b.set_storage_format(f);
    EXPECT_TRUE(b.stores_16_bit());
    EXPECT_EQ(b.bytes(), 0);                  // the float buffer is gone
    EXPECT_EQ(b.wire_buffer_bytes(), 4 * 3 * 2);  // capacity x cols x 2 bytes
    EXPECT_EQ(b.wire_value_bytes(), 2);
    EXPECT_EQ(b.cols(), 3);
    std::vector<float> rounded(v.size());
    for (size_t i = 0; i < v.size(); ++i) rounded[i] = round_to(f, v[i]);
    b.store(test::to_device(rounded, 2, 3));
    Vector<float> work("work", 12);
    const Matrix<float> back = b.load(2, work.data());
    EXPECT_EQ(back.extent(0), 2u);
    EXPECT_EQ(back.data(), work.data());
    EXPECT_EQ(test::to_host(back), rounded) << name(f);
  }
  BoundaryBuffer<float> b("gpipe::test::boundary", 2, 2);
  EXPECT_THROW(b.set_storage_format(Format::fp32), std::invalid_argument);
  EXPECT_THROW(b.store(ConstMatrix<float>()), std::logic_error);  // no 16-bit storage
  BoundaryBuffer<double> d("gpipe::test::boundary", 2, 2);
  EXPECT_THROW(d.set_storage_format(Format::bf16), std::invalid_argument);
}

// The README's quickstart, CNN and ViT decks on K = 1..4 cells under
// fill_drain, 1f1b and zero_bubble: with bf16 (16-bit storage) every kept
// value's slot bytes (the stage input and output, the kept layer outputs,
// zero_bubble's kept output gradients) are exactly half of float's, and
// the rest (saved state, logits, fill_drain's whole-batch stacks) is
// unchanged; plan_run reports the planned bytes of those slots. Known
// numbers: the quickstart on one cell (16-row micro-batches, 8 slots).
TEST(SixteenBitStorage, KeptValueBytesOfTheReadmeDecksAreHalfOfFloat) {
  for (const char* file : {"fashion_mnist_mlp", "fashion_mnist_cnn", "fashion_mnist_vit"})
    for (const char* schedule : {"fill_drain", "1f1b", "zero_bubble"})
      for (int K = 1; K <= 4; ++K) {
        SCOPED_TRACE(std::string(file) + " " + schedule + " K=" + std::to_string(K));
        const std::string path = std::string(GPIPE_SOURCE_DIR "/inputs/") + file + ".yaml";
        const std::string sched = std::string("pipeline.schedule=") + schedule;
        const Deck f = load_deck(path, {sched}), b = load_deck(path, {sched, "precision=bf16"});
        const RunPlan pf = plan_run(f, K), pb = plan_run(b, K);
        ASSERT_EQ(pf.partition.counts, pb.partition.counts);
        const Schedule s = deck_schedule(f, K);
        CellOptions of;
        of.max_batch = largest_shard(f, 1);
        of.micro_batches = f.training.micro_batches;
        of.remat = f.pipeline.remat;
        of.schedule = f.pipeline.schedule;
        CellOptions ob = of;
        ob.wire = Format::bf16;
        const auto shapes = model_shapes(f.model);
        std::int64_t kept_output_grads = 0;
        for (int k = 0; k < K; ++k) {
          const StageSlotBytes sf = stage_slot_bytes(shapes, pf.partition, k, s, of, 4);
          const StageSlotBytes sb = stage_slot_bytes(shapes, pb.partition, k, s, ob, 4);
          EXPECT_GT(sf.values.micro_batch, 0);
          EXPECT_EQ(2 * sb.values.micro_batch, sf.values.micro_batch);
          EXPECT_EQ(2 * sb.values.activations, sf.values.activations);
          EXPECT_EQ(2 * sb.values.weight_grad, sf.values.weight_grad);
          EXPECT_EQ(sb.values.fixed + sb.values.batch_weights + sb.values.input_grad, 0);
          EXPECT_EQ(sb.scalar.micro_batch, sf.scalar.micro_batch);
          EXPECT_EQ(sb.scalar.activations, sf.scalar.activations);
          EXPECT_EQ(sb.scalar.fixed, sf.scalar.fixed);
          EXPECT_EQ(sb.scalar.batch_weights, sf.scalar.batch_weights);
          const CellBufferPlan plan = plan_buffers(s, k);
          kept_output_grads += plan.weight_grad.slots * sf.values.weight_grad;
          EXPECT_EQ(pf.activation_bytes[size_t(k)], planned_bytes(plan, sf.total()));
          EXPECT_EQ(pb.activation_bytes[size_t(k)], planned_bytes(plan, sb.total()));
          // What halves: every slot's kept values, times the plan's slot counts.
          EXPECT_EQ(pf.activation_bytes[size_t(k)] - pb.activation_bytes[size_t(k)],
                    plan.micro_batch.slots * sb.values.micro_batch + plan.activations.slots * sb.values.activations +
                        plan.weight_grad.slots * sb.values.weight_grad);
        }
        // Kept for W: zero_bubble's splitting layers (Dense, conv2d) before a stage's last
        // (the ViT's one Dense layer is the model's last: nothing kept).
        if (std::string(schedule) != "zero_bubble" || std::string(file) == "fashion_mnist_vit")
          EXPECT_EQ(kept_output_grads, 0);
        else
          EXPECT_GT(kept_output_grads, 0);
        // pipeline.activation_storage: float keeps float's bytes.
        const Deck bf = load_deck(path, {sched, "precision=bf16", "pipeline.activation_storage=float"});
        EXPECT_EQ(plan_run(bf, K).activation_bytes, pf.activation_bytes);
      }
  // The quickstart, K = 1, fill_drain: 16 rows x (input 784 + outputs
  // 512 + 512 + 512 + 256 + 256 + 256) in 8 slots, halved; the logits
  // (16 x 10) and the whole-batch W's stacks (128 x (512 + 256 + 10 + 512))
  // in float either way.
  const std::string quickstart = GPIPE_SOURCE_DIR "/inputs/fashion_mnist_mlp.yaml";
  EXPECT_EQ(plan_run(load_deck(quickstart), 1).activation_bytes.at(0),
            8 * 16 * (784 + 2304) * 4 + 16 * 10 * 4 + 128 * 1290 * 4);
  EXPECT_EQ(plan_run(load_deck(quickstart, {"precision=bf16"}), 1).activation_bytes.at(0),
            8 * 16 * (784 + 2304) * 2 + 16 * 10 * 4 + 128 * 1290 * 4);
  EXPECT_EQ(plan_run(load_deck(quickstart, {"precision=fp16", "pipeline.schedule=1f1b"}), 1).activation_bytes.at(0),
            16 * (784 + 2304) * 2 + 16 * 10 * 4);
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScaler s(1024.0, 3, 2.0, 0.5);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_TRUE(s.update(false));  // third good step: grows
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));  // overflow: skipped, backs off, counter reset
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.overflows(), 1);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1024.0);
}

// A model that overflows at every step: before, S halved without end, to a
// subnormal and 0, whose reciprocal (the unscale of the next finite step) is
// infinite in fp32 (NaN weights); a scale grown to infinity never backed
// off (inf x 0.5 = inf). S now stays in [2^-24, 2^64].
TEST(LossScaler, StaysInItsRangeWhateverTheOverflows) {
  LossScaler down(1.0, 1000, 2.0, 0.5);
  for (int i = 0; i < 2000; ++i) EXPECT_FALSE(down.update(true));
  EXPECT_EQ(down.scale(), 0x1p-24);
  EXPECT_EQ(down.overflows(), 2000);
  EXPECT_TRUE(std::isfinite(float(1.0 / down.scale())));
  LossScaler up(65536.0, 1, 2.0, 0.5);
  for (int i = 0; i < 2000; ++i) EXPECT_TRUE(up.update(false));
  EXPECT_EQ(up.scale(), 0x1p64);
  EXPECT_FALSE(up.update(true));  // and it still backs off
  EXPECT_EQ(up.scale(), 0x1p63);
  up.restore(0.0, 0, 0);  // a restored scale is clamped too
  EXPECT_EQ(up.scale(), 0x1p-24);
  EXPECT_EQ(LossScaler(1e300, 1, 2.0, 0.5).scale(), 0x1p64);
}

}  // namespace
}  // namespace gpipe

// The kernel seam's GEMM primitives (gpipe/kernels/gemm.hpp): the portable
// reference on a hand-computed case, every other implementation against it
// on edge shapes (1 row, 1 column, k = 1, odd sizes, every transposition,
// alpha != 1, beta 0 and not) with the tolerance of a k-term dot product,
// gamma_k = k eps / (1 - k eps) times (|A| |B|)_ij (Higham 2002, eq. 3.13);
// and, per implementation, the determinism the bitwise invariants need:
// a row's result does not depend on how many rows the call has, and a
// repeated call gives bitwise the same result.

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/kernel_choice.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/gemm.hpp"

namespace gpipe {
namespace {

using kernels::Choice;
using kernels::Op;

// Every choice that forces one implementation, portable first.
std::vector<Choice> forced_choices() {
  std::vector<Choice> out;
  for (auto i : kernels::available()) out.push_back(test::forcing(i));
  return out;
}

// Restores the default choice when a test ends.
struct Selected {
  explicit Selected(Choice c) { kernels::select(c); }
  ~Selected() { kernels::select(Choice::automatic); }
};

template <class T>
Matrix<T> random(std::int64_t rows, std::int64_t cols, std::uint64_t seed, double lo = -1, double hi = 1) {
  const auto d = test::uniform(size_t(rows * cols), seed, lo, hi);
  return test::to_device(std::vector<T>(d.begin(), d.end()), rows, cols);
}

template <class T>
Matrix<T> absolute(const Matrix<T>& m) {
  auto h = test::to_host(m);
  for (auto& v : h) v = std::abs(v);
  return test::to_device(h, std::int64_t(m.extent(0)), std::int64_t(m.extent(1)));
}

struct Case {
  std::int64_t m, n, k;
  Op ta, tb;
  double alpha, beta;
};

std::vector<Case> edge_cases() {
  std::vector<Case> out;
  const std::int64_t sizes[][3] = {{1, 1, 1}, {1, 7, 5}, {13, 1, 9}, {5, 6, 1}, {33, 17, 65}, {64, 10, 1024}, {3, 192, 64}};
  for (const auto& s : sizes)
    for (Op ta : {Op::none, Op::transpose})
      for (Op tb : {Op::none, Op::transpose}) {
        out.push_back({s[0], s[1], s[2], ta, tb, 1.0, 0.0});
        out.push_back({s[0], s[1], s[2], ta, tb, 0.7, 1.3});
      }
  return out;
}

template <class T>
std::vector<T> run_gemm(Choice choice, const Case& c, const Matrix<T>& a, const Matrix<T>& b, const Matrix<T>& c0) {
  Selected s(choice);
  Matrix<T> out("c", c.m, c.n);
  Kokkos::deep_copy(out, c0);
  kernels::gemm<T>(ExecSpace(), c.ta, c.tb, T(c.alpha), a, b, T(c.beta), out);
  return test::to_host(out);
}

TEST(KernelsGemm, PortableKnownValues) {
  // [1 2; 3 4] [5 6; 7 8] = [19 22; 43 50]; A^T B = [26 30; 38 44]; 2 A B^T + C = ...
  Selected s(Choice::portable);
  const auto a = test::to_device(std::vector<double>{1, 2, 3, 4}, 2, 2);
  const auto b = test::to_device(std::vector<double>{5, 6, 7, 8}, 2, 2);
  Matrix<double> c("c", 2, 2);
  kernels::gemm<double>(ExecSpace(), Op::none, Op::none, 1.0, a, b, 0.0, c);
  EXPECT_EQ(test::to_host(c), (std::vector<double>{19, 22, 43, 50}));
  kernels::gemm<double>(ExecSpace(), Op::transpose, Op::none, 1.0, a, b, 0.0, c);
  EXPECT_EQ(test::to_host(c), (std::vector<double>{26, 30, 38, 44}));
  Kokkos::deep_copy(c, 1.0);
  kernels::gemm<double>(ExecSpace(), Op::none, Op::transpose, 2.0, a, b, 0.5, c);  // A B^T = [17 23; 39 53]
  EXPECT_EQ(test::to_host(c), (std::vector<double>{34.5, 46.5, 78.5, 106.5}));
  const auto bias = test::to_device(std::vector<double>{10, 20}, 1, 2);
  kernels::gemm_bias<double>(ExecSpace(), a, b, bias, c);
  EXPECT_EQ(test::to_host(c), (std::vector<double>{29, 42, 53, 70}));
}

TEST(KernelsGemm, BetaZeroIgnoresNaN) {
  for (Choice choice : forced_choices()) {
    const Case c{3, 4, 5, Op::none, Op::none, 1.0, 0.0};
    const auto a = random<float>(3, 5, 1), b = random<float>(5, 4, 2);
    Matrix<float> nan("nan", 3, 4);
    Kokkos::deep_copy(nan, std::numeric_limits<float>::quiet_NaN());
    for (float v : run_gemm<float>(choice, c, a, b, nan)) EXPECT_TRUE(std::isfinite(v)) << kernels::name(choice);
  }
}

template <class T>
void against_portable() {
  const double eps = std::numeric_limits<T>::epsilon();
  for (const Case& c : edge_cases()) {
    const auto a = c.ta == Op::none ? random<T>(c.m, c.k, 3) : random<T>(c.k, c.m, 3);
    const auto b = c.tb == Op::none ? random<T>(c.k, c.n, 4) : random<T>(c.n, c.k, 4);
    const auto c0 = random<T>(c.m, c.n, 5);
    // Error bound: gamma_{k+2} (|alpha| |A||B| + |beta| |C|), the +2 for alpha and beta's roundings.
    Case bound_case = c;
    bound_case.alpha = std::abs(c.alpha);
    bound_case.beta = std::abs(c.beta);
    const auto bound = run_gemm<T>(Choice::portable, bound_case, absolute(a), absolute(b), absolute(c0));
    const double gamma = double(c.k + 2) * eps / (1 - double(c.k + 2) * eps);
    const auto ref = run_gemm<T>(Choice::portable, c, a, b, c0);
    for (const auto impl : kernels::available()) {
      if (!kernels::has(impl, kernels::Primitive::gemm, int(sizeof(T)))) continue;
      const Choice choice = test::forcing(impl);
      const auto got = run_gemm<T>(choice, c, a, b, c0);
      for (size_t e = 0; e < ref.size(); ++e)
        // Both results are within gamma * bound of the exact one.
        ASSERT_LE(std::abs(double(got[e]) - double(ref[e])), 2 * gamma * double(bound[e]) + 1e-30)
            << kernels::name(choice) << " m " << c.m << " n " << c.n << " k " << c.k << " ta " << int(c.ta)
            << " tb " << int(c.tb) << " beta " << c.beta << " element " << e;
    }
  }
}

TEST(KernelsGemm, EveryImplementationAgainstPortableFloat) { against_portable<float>(); }
TEST(KernelsGemm, EveryImplementationAgainstPortableDouble) { against_portable<double>(); }

TEST(KernelsGemm, GemmBiasAgainstPortable) {
  const double eps = std::numeric_limits<float>::epsilon();
  for (const auto& s : std::vector<std::array<std::int64_t, 3>>{{1, 1, 1}, {1, 10, 64}, {7, 13, 5}, {256, 192, 64}}) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    const auto x = random<float>(m, k, 6), w = random<float>(k, n, 7), bias = random<float>(1, n, 8);
    std::vector<std::vector<float>> results;
    for (Choice choice : forced_choices()) {
      Selected sel(choice);
      Matrix<float> y("y", m, n);
      kernels::gemm_bias<float>(ExecSpace(), x, w, bias, y);
      results.push_back(test::to_host(y));
    }
    const double gamma = double(k + 1) * eps / (1 - double(k + 1) * eps);
    for (size_t r = 1; r < results.size(); ++r)
      for (size_t e = 0; e < results[0].size(); ++e)
        // |x| |w| + |b| <= k + 1 for entries in [-1, 1].
        ASSERT_LE(std::abs(results[r][e] - results[0][e]), 2 * gamma * double(k + 1)) << m << " " << n << " " << k;
  }
}

// Every implementation: a repeated call is bitwise the same. oneDNN's
// matmul also gives a row bitwise the same result whatever the call's row
// count (micro-batch size), at the decks' widths; OpenBLAS' sgemm (the
// portable path's TPL) does not (a call of 1, 3 or 255 rows differs in the
// last bits from one of 256: its kernel blocks 16 rows), so the bitwise
// guarantees hold at fixed M (docs/design.md, "Guarantees") and, with
// gemm on oneDNN, would hold across M too.
TEST(KernelsGemm, RepeatableAndOneDnnRowsIndependentOfRowCount) {
  for (Choice choice : forced_choices()) {
    Selected sel(choice);
    for (const auto& s : std::vector<std::array<std::int64_t, 2>>{{784, 1024}, {1024, 1024}, {1024, 10}, {64, 192},
                                                                 {128, 64}, {5, 3}}) {
      const std::int64_t k = s[0], n = s[1];
      const auto w = random<float>(k, n, 9), bias = random<float>(1, n, 10);
      const auto x = random<float>(256, k, 11);
      Matrix<float> full("full", 256, n);
      kernels::gemm_bias<float>(ExecSpace(), x, w, bias, full);
      const auto all = test::to_host(full);
      kernels::gemm_bias<float>(ExecSpace(), x, w, bias, full);
      ASSERT_EQ(test::to_host(full), all) << "repeat " << kernels::name(choice);
      const auto dy = random<float>(256, n, 12);  // dX = dY W^T
      Matrix<float> dx_full("dx", 256, k);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, w, 0.0f, dx_full);
      const auto dx_all = test::to_host(dx_full);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, w, 0.0f, dx_full);
      ASSERT_EQ(test::to_host(dx_full), dx_all) << "repeat dY W^T " << kernels::name(choice);
      // oneDNN's f32 GEMM keeps a row's bits whatever the row count where
      // `auto` runs it (onednn_f32_gemm_rule: AVX-512 and up); below, `auto`
      // runs the portable GEMM instead.
      if (choice != Choice::onednn) continue;
      if (!kernels::onednn_f32_gemm_rule(kernels::this_cpu())) {
        const Selected automatic(Choice::automatic);
        EXPECT_EQ(kernels::implementation(kernels::Primitive::gemm, 4), kernels::Implementation::portable);
        EXPECT_EQ(kernels::implementation(kernels::Primitive::gemm_bias, 4), kernels::Implementation::portable);
        continue;
      }
      for (std::int64_t rows : {1, 3, 16, 32, 255}) {
        Matrix<float> part("part", rows, n);
        kernels::gemm_bias<float>(ExecSpace(), leading_rows(x, rows), w, bias, part);
        const auto p = test::to_host(part);
        ASSERT_TRUE(std::equal(p.begin(), p.end(), all.begin()))
            << kernels::name(choice) << " k " << k << " n " << n << " rows " << rows;
        Matrix<float> dx_part("dxp", rows, k);
        kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, leading_rows(dy, rows), w, 0.0f, dx_part);
        const auto q = test::to_host(dx_part);
        ASSERT_TRUE(std::equal(q.begin(), q.end(), dx_all.begin()))
            << "dY W^T " << kernels::name(choice) << " k " << k << " n " << n << " rows " << rows;
      }
    }
  }
}

// Parameter operands in a FrozenWeights scope (gemm.hpp): the first product
// with a W runs unpacked, the later ones on the packed copy; every one is
// bitwise the unpacked product, for every implementation, form and shape
// (the bitwise invariants across schedules need it: the first use of a W
// is another micro-batch in fill_drain than in 1F1B).
TEST(KernelsGemm, PackedWeightsBitwiseUnpacked) {
  for (Choice choice : forced_choices()) {
    Selected sel(choice);
    for (const auto& s : std::vector<std::array<std::int64_t, 3>>{
             {1, 1, 1}, {1, 7, 5}, {13, 1, 9}, {5, 6, 1}, {33, 17, 65}, {32, 1024, 1024}, {32, 10, 1024},
             {256, 192, 64}, {2048, 64, 128}}) {
      const std::int64_t m = s[0], n = s[1], k = s[2];
      const auto x = random<float>(m, k, 21), w = random<float>(k, n, 22), bias = random<float>(1, n, 23);
      const auto dy = random<float>(m, n, 24), c0 = random<float>(m, k, 25), xt = random<float>(k, m, 26);
      Matrix<float> y("y", m, n), dx("dx", m, k), z("z", m, n);
      // Unpacked references: Y = X W + b, dX = dY W^T, Z = 0.7 X^T' W + 1.3 Z0 with A transposed.
      kernels::gemm_bias<float>(ExecSpace(), x, w, bias, y);
      const auto y_ref = test::to_host(y);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, w, 0.0f, dx);
      const auto dx_ref = test::to_host(dx);
      const auto z0 = random<float>(m, n, 27);
      Kokkos::deep_copy(z, z0);
      kernels::gemm<float>(ExecSpace(), Op::transpose, Op::none, 0.7f, xt, w, 1.3f, z);
      const auto z_ref = test::to_host(z);
      const kernels::FrozenWeights frozen;
      for (int use = 0; use < 3; ++use) {
        const std::string where = fmt::format("{} m {} n {} k {} use {}", kernels::name(choice), m, n, k, use);
        Kokkos::deep_copy(y, std::numeric_limits<float>::quiet_NaN());
        kernels::gemm_bias_weights<float>(ExecSpace(), x, w, bias, y);
        ASSERT_EQ(test::to_host(y), y_ref) << "X W + b " << where;
        Kokkos::deep_copy(dx, c0);
        kernels::gemm_weights<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, w, 0.0f, dx);
        ASSERT_EQ(test::to_host(dx), dx_ref) << "dY W^T " << where;
        Kokkos::deep_copy(z, z0);
        kernels::gemm_weights<float>(ExecSpace(), Op::transpose, Op::none, 0.7f, xt, w, 1.3f, z);
        ASSERT_EQ(test::to_host(z), z_ref) << "0.7 A^T W + 1.3 C " << where;
      }
      if (choice == Choice::onednn && kernels::onednn_f32_gemm_rule(kernels::this_cpu()))  // packed: W in two forms
        EXPECT_GE(kernels::FrozenWeights::packed_bytes(), 2 * k * n * std::int64_t(sizeof(float))) << kernels::name(choice);
      else if (choice == Choice::onednn)  // below AVX-512 oneDNN never packs (gemm_onednn.cpp)
        EXPECT_EQ(kernels::FrozenWeights::packed_bytes(), 0) << kernels::name(choice);
    }
  }
}

// A packed copy belongs to its scope and its W: new contents at the same
// address in the next scope, and another W of the same shape in the same
// scope, give their own products.
TEST(KernelsGemm, PackedWeightsFollowTheirWeights) {
  EXPECT_EQ(kernels::FrozenWeights::current(), 0u);
  for (Choice choice : forced_choices()) {
    Selected sel(choice);
    const std::int64_t m = 32, n = 48, k = 64;
    const auto x = random<float>(m, k, 31), bias = random<float>(1, n, 32), dy = random<float>(m, n, 33);
    auto w = random<float>(k, n, 34);
    const auto w2 = random<float>(k, n, 35), w_new = random<float>(k, n, 36);
    const auto plain = [&](const Matrix<float>& weights) {
      Matrix<float> y("y", m, n), dx("dx", m, k);
      kernels::gemm_bias<float>(ExecSpace(), x, weights, bias, y);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, weights, 0.0f, dx);
      return std::make_pair(test::to_host(y), test::to_host(dx));
    };
    const auto frozen_products = [&](const Matrix<float>& weights) {
      Matrix<float> y("y", m, n), dx("dx", m, k);
      for (int use = 0; use < 2; ++use) {
        kernels::gemm_bias_weights<float>(ExecSpace(), x, weights, bias, y);
        kernels::gemm_weights<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, weights, 0.0f, dx);
      }
      return std::make_pair(test::to_host(y), test::to_host(dx));
    };
    const auto first = plain(w), second = plain(w2), updated = plain(w_new);
    ASSERT_NE(first.first, updated.first);
    std::uint64_t scope = 0;
    {
      const kernels::FrozenWeights frozen;
      scope = kernels::FrozenWeights::current();
      EXPECT_NE(scope, 0u);
      {
        const kernels::FrozenWeights nested;
        EXPECT_EQ(kernels::FrozenWeights::current(), scope) << "nested scopes: the outermost counts";
      }
      EXPECT_EQ(kernels::FrozenWeights::current(), scope);
      EXPECT_EQ(frozen_products(w), first) << kernels::name(choice);
      EXPECT_EQ(frozen_products(w2), second) << "another W of the same shape " << kernels::name(choice);
      EXPECT_EQ(frozen_products(w), first) << "the first W again " << kernels::name(choice);
    }
    EXPECT_EQ(kernels::FrozenWeights::current(), 0u);
    Kokkos::deep_copy(w, w_new);  // an optimizer step: the same address, new contents
    {
      const kernels::FrozenWeights frozen;
      EXPECT_GT(kernels::FrozenWeights::current(), scope);
      EXPECT_EQ(frozen_products(w), updated) << "updated W " << kernels::name(choice);
    }
    EXPECT_EQ(plain(w), updated);
    // Below AVX-512 oneDNN never packs (gemm_onednn.cpp): nothing to follow.
    if (choice == Choice::onednn && !kernels::onednn_f32_gemm_rule(kernels::this_cpu()))
      EXPECT_EQ(kernels::FrozenWeights::packed_bytes(), 0);
    else if (choice == Choice::onednn) {  // w2, unused in the second scope, was dropped at its end; w stays packed
      const std::int64_t one = kernels::FrozenWeights::packed_bytes();
      EXPECT_GE(one, 2 * k * n * std::int64_t(sizeof(float)));
      {
        const kernels::FrozenWeights frozen;
        frozen_products(w2);
        frozen_products(w);
        EXPECT_EQ(kernels::FrozenWeights::packed_bytes(), 2 * one);
      }
      { const kernels::FrozenWeights frozen; frozen_products(w); }
      EXPECT_EQ(kernels::FrozenWeights::packed_bytes(), one);
    }
  }
}

// Idle-time packing (FrozenWeights::pack_next, what a waiting stage does):
// in a scope with a weight range, the W the previous scope packed are
// packed ahead, one per call, only inside the range; the first products
// then run packed and are bitwise the plain ones. Nothing to pack outside
// a scope, in a scope without a range, below AVX-512 and without oneDNN.
TEST(KernelsGemm, PackNextPacksThePreviousScopesWeightsInsideTheRange) {
  const Selected sel(Choice::onednn);
  const std::int64_t m = 32, n = 48, k = 64;
  const auto x = random<float>(m, k, 41), bias = random<float>(1, n, 42), dy = random<float>(m, n, 43);
  const auto params = random<float>(1, 2 * k * n, 44);  // two W back to back: a cell's parameter vector
  const Matrix<float> w(params.data(), k, n), w2(params.data() + k * n, k, n);
  const auto outside = random<float>(k, n, 45);
  const auto products = [&](const Matrix<float>& weights, bool frozen_form) {
    Matrix<float> y("y", m, n), dx("dx", m, k);
    if (frozen_form) {
      kernels::gemm_bias_weights<float>(ExecSpace(), x, weights, bias, y);
      kernels::gemm_weights<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, weights, 0.0f, dx);
    } else {
      kernels::gemm_bias<float>(ExecSpace(), x, weights, bias, y);
      kernels::gemm<float>(ExecSpace(), Op::none, Op::transpose, 1.0f, dy, weights, 0.0f, dx);
    }
    return std::make_pair(test::to_host(y), test::to_host(dx));
  };
  const auto plain_w = products(w, false), plain_w2 = products(w2, false), plain_out = products(outside, false);
  const std::int64_t range = std::int64_t(params.span() * sizeof(float));
  EXPECT_FALSE(kernels::FrozenWeights::pack_next()) << "outside a scope";
  {  // the first scope packs at the second product, as without a range
    const kernels::FrozenWeights frozen(params.data(), range);
    for (int use = 0; use < 2; ++use) {
      EXPECT_EQ(products(w, true), plain_w);
      EXPECT_EQ(products(w2, true), plain_w2);
      EXPECT_EQ(products(outside, true), plain_out);
    }
  }
  const bool packs = kernels::implementation(kernels::Primitive::gemm, 4) == kernels::Implementation::onednn &&
                     kernels::onednn_f32_gemm_rule(kernels::this_cpu());  // not under GPIPE_KERNELS=portable
  {
    const kernels::FrozenWeights frozen;  // no range: nothing packed ahead
    EXPECT_FALSE(kernels::FrozenWeights::pack_next());
    for (int use = 0; use < 2; ++use) products(w, true), products(w2, true), products(outside, true);
  }
  {
    const kernels::FrozenWeights frozen(params.data(), range);
    int packed = 0;
    while (kernels::FrozenWeights::pack_next()) ++packed;
    // w and w2, each in its two forms (X W + b and dY W^T); never `outside`
    EXPECT_EQ(packed, packs ? 4 : 0);
    EXPECT_EQ(products(w, true), plain_w) << "first products after packing ahead";
    EXPECT_EQ(products(w2, true), plain_w2);
    EXPECT_EQ(products(outside, true), plain_out);
    EXPECT_FALSE(kernels::FrozenWeights::pack_next()) << "all packed";
  }
}

TEST(KernelsGemm, BatchedAgainstPerMatrixGemm) {
  // 2 x 3 matrices of (5, 4) inside a (2*5, 3*... ) interleaved buffer, times (4, 6), against one gemm each.
  const std::int64_t outer = 2, inner = 3, r = 5, k = 4, c = 6;
  const double eps = std::numeric_limits<float>::epsilon();
  const auto a = random<float>(outer * r, inner * k + 1, 13);  // ld = inner*k + 1 (padding column)
  const auto b = random<float>(outer * inner * k, c, 14);
  const kernels::Strided sa{r, k, inner * k + 1, r * (inner * k + 1), k};
  const kernels::Strided sb{k, c, c, inner * k * c, k * c};
  const kernels::Strided sc{r, c, inner * c, r * inner * c, c};
  const auto ah = test::to_host(a), bh = test::to_host(b);
  for (Choice choice : forced_choices()) {
    Selected sel(choice);
    Matrix<float> out("out", outer * r, inner * c);
    kernels::batched_gemm<float>(ExecSpace(), Op::none, Op::none, outer, inner, 0.5f, a.data(), sa, b.data(), sb, 0.0f,
                                 out.data(), sc);
    const auto got = test::to_host(out);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) {
        std::vector<float> am(size_t(r * k)), bm(size_t(k * c));
        for (std::int64_t x = 0; x < r; ++x)
          for (std::int64_t y = 0; y < k; ++y) am[size_t(x * k + y)] = ah[size_t(o * sa.outer_stride + i * sa.inner_stride + x * sa.ld + y)];
        for (std::int64_t x = 0; x < k; ++x)
          for (std::int64_t y = 0; y < c; ++y) bm[size_t(x * c + y)] = bh[size_t(o * sb.outer_stride + i * sb.inner_stride + x * sb.ld + y)];
        Matrix<float> ref("ref", r, c);
        {
          Selected portable(Choice::portable);
          kernels::gemm<float>(ExecSpace(), Op::none, Op::none, 0.5f, test::to_device(am, r, k), test::to_device(bm, k, c),
                               0.0f, ref);
        }
        kernels::select(choice);
        const auto rh = test::to_host(ref);
        for (std::int64_t x = 0; x < r; ++x)
          for (std::int64_t y = 0; y < c; ++y)
            ASSERT_NEAR(got[size_t(o * sc.outer_stride + i * sc.inner_stride + x * sc.ld + y)], rh[size_t(x * c + y)],
                        2 * (k + 1) * eps * 0.5 * k)
                << kernels::name(choice) << " matrix " << o << "," << i;
      }
  }
}

TEST(KernelsGemm, ShapeErrors) {
  const auto a = random<float>(3, 4, 1), b = random<float>(5, 2, 2);
  Matrix<float> c("c", 3, 2);
  try {
    kernels::gemm<float>(ExecSpace(), Op::none, Op::none, 1.0f, a, b, 0.0f, c);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gpipe::kernels::gemm: op(A) 3x4, op(B) 5x2, C (3, 2)");
  }
}

// The words a build accepts depend on what it reports it has: always auto,
// portable and onednn, then cublas and cudnn where built (a CUDA build:
// "expected auto, portable, onednn, cublas or cudnn").
std::string expected_choices() {
  std::vector<std::string> words{"auto", "portable", "onednn"};
  for (const auto i : kernels::available())
    if (i == kernels::Implementation::cublas || i == kernels::Implementation::cudnn) words.push_back(kernels::name(i));
  std::string out = words[0];
  for (size_t i = 1; i < words.size(); ++i) out += (i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

TEST(KernelsBackend, ChoiceParsingAndSummary) {
  EXPECT_EQ(kernels::parse_choice("auto", "f"), Choice::automatic);
  EXPECT_EQ(kernels::parse_choice("portable", "f"), Choice::portable);
  try {
    kernels::parse_choice("fast", "deck.yaml: kernels");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "deck.yaml: kernels: unknown kernels 'fast' (expected " + expected_choices() + ")");
  }
  const auto impls = kernels::available();
  const bool onednn = std::find(impls.begin(), impls.end(), kernels::Implementation::onednn) != impls.end();
  // oneDNN compiled in but unused (a device memory space, e.g. CUDA with
  // GPIPE_ENABLE_ONEDNN on) is a different error from oneDNN not built.
  const bool onednn_built = kernels::build_summary().find("oneDNN not built") == std::string::npos;
  if (onednn) {
    EXPECT_EQ(kernels::parse_choice("onednn", "f"), Choice::onednn);
  } else {
    try {
      kernels::parse_choice("onednn", "deck.yaml: kernels");
      FAIL() << "no error";
    } catch (const InputError& e) {
      if (onednn_built)
        EXPECT_EQ(std::string(e.what()), std::string("deck.yaml: kernels: 'onednn' runs on host memory only; this "
                                                     "build's memory space is ") + MemSpace::name());
      else
        EXPECT_STREQ(e.what(), "deck.yaml: kernels: this build has no oneDNN (configure with GPIPE_ENABLE_ONEDNN=ON "
                               "and oneDNN installed); expected auto or portable");
    }
  }
  for (const auto vendor : {kernels::Implementation::cublas, kernels::Implementation::cudnn}) {
    const std::string word = kernels::name(vendor);
    if (std::find(impls.begin(), impls.end(), vendor) != impls.end()) {
      EXPECT_EQ(kernels::parse_choice(word, "f"), test::forcing(vendor));
      continue;
    }
    try {
      kernels::parse_choice(word, "GPIPE_KERNELS");
      FAIL() << "no error for " << word;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("GPIPE_KERNELS: this build has no " + std::string(word == "cublas" ? "cuBLAS" : "cuDNN"), 0), 0u) << what;
      EXPECT_NE(what.find("; expected " + expected_choices()), std::string::npos) << what;
    }
  }
  Selected sel(Choice::portable);
  EXPECT_EQ(kernels::implementation(kernels::Primitive::attention, 4), kernels::Implementation::portable);
  EXPECT_NE(kernels::selection_summary().find("portable: gemm float portable"), std::string::npos)
      << kernels::selection_summary();
  kernels::select(Choice::onednn);
  if (onednn) {
    EXPECT_EQ(kernels::implementation(kernels::Primitive::gemm, 4), kernels::Implementation::onednn);
    EXPECT_EQ(kernels::implementation(kernels::Primitive::gemm, 8), kernels::Implementation::portable);  // no f64
  }
}

}  // namespace
}  // namespace gpipe

// The kernel seam's cuBLAS / cuBLASLt implementation (src/kernels/gemm_cublas.cpp)
// against the portable reference, built into gpipe_unit_tests only in CUDA
// builds with GPIPE_ENABLE_CUBLAS (tests/CMakeLists.txt); it runs on a GPU
// node. Written and compiled without a GPU: see docs/porting.md.
//
// Tolerance: a k-term dot product's gamma_k = k eps / (1 - k eps) times
// (|alpha| |A||B| + |beta| |C|)_ij (Higham 2002, eq. 3.13), for both results.
// Determinism: a repeated call is bitwise the same, and a row's result does
// not depend on the call's row count (the algorithm chosen at a reference
// row count, gemm_cublas.cpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "../common/test_util.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/gemm.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

using kernels::Choice;
using kernels::Op;

struct Selected {
  explicit Selected(Choice c) { kernels::select(c); }
  ~Selected() { kernels::select(Choice::automatic); }
};

template <class T>
Matrix<T> random(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  const auto d = test::uniform(size_t(rows * cols), seed, -1, 1);
  return test::to_device(std::vector<T>(d.begin(), d.end()), rows, cols);
}

template <class T>
Matrix<T> absolute(const Matrix<T>& m) {
  auto h = test::to_host(m);
  for (auto& v : h) v = std::abs(v);
  return test::to_device(h, std::int64_t(m.extent(0)), std::int64_t(m.extent(1)));
}

template <class T>
std::vector<T> run(Choice choice, Op ta, Op tb, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
                   const Matrix<T>& c0) {
  Selected s(choice);
  Matrix<T> out("c", c0.extent(0), c0.extent(1));
  Kokkos::deep_copy(out, c0);
  kernels::gemm<T>(ExecSpace(), ta, tb, alpha, a, b, beta, out);
  return test::to_host(out);
}

TEST(KernelsCublas, IsAvailableAndChosenByAuto) {
  const auto impls = kernels::available();
  EXPECT_NE(std::find(impls.begin(), impls.end(), kernels::Implementation::cublas), impls.end());
  for (auto p : {kernels::Primitive::gemm, kernels::Primitive::gemm_bias, kernels::Primitive::batched_gemm})
    for (int bytes : {4, 8}) {
      EXPECT_TRUE(kernels::has(kernels::Implementation::cublas, p, bytes));
      EXPECT_EQ(kernels::implementation(p, bytes), kernels::Implementation::cublas);
    }
  EXPECT_EQ(kernels::parse_choice("cublas", "f"), Choice::cublas);
  EXPECT_NE(kernels::build_summary().find(", cublas (cuBLAS "), std::string::npos) << kernels::build_summary();
}

template <class T>
void gemm_against_portable() {
  const double eps = std::numeric_limits<T>::epsilon();
  const std::int64_t sizes[][3] = {{1, 1, 1}, {1, 7, 5}, {13, 1, 9}, {5, 6, 1}, {33, 17, 65}, {64, 10, 1024}, {3, 192, 64}};
  for (const auto& s : sizes)
    for (Op ta : {Op::none, Op::transpose})
      for (Op tb : {Op::none, Op::transpose})
        for (const auto& ab : {std::pair<double, double>{1.0, 0.0}, std::pair<double, double>{0.7, 1.3}}) {
          const std::int64_t m = s[0], n = s[1], k = s[2];
          const auto a = ta == Op::none ? random<T>(m, k, 3) : random<T>(k, m, 3);
          const auto b = tb == Op::none ? random<T>(k, n, 4) : random<T>(n, k, 4);
          const auto c0 = random<T>(m, n, 5);
          const auto bound = run<T>(Choice::portable, ta, tb, T(std::abs(ab.first)), absolute(a), absolute(b),
                                    T(std::abs(ab.second)), absolute(c0));
          const auto ref = run<T>(Choice::portable, ta, tb, T(ab.first), a, b, T(ab.second), c0);
          const auto got = run<T>(Choice::cublas, ta, tb, T(ab.first), a, b, T(ab.second), c0);
          const double gamma = double(k + 2) * eps / (1 - double(k + 2) * eps);
          for (size_t e = 0; e < ref.size(); ++e)
            ASSERT_LE(std::abs(double(got[e]) - double(ref[e])), 2 * gamma * double(bound[e]) + 1e-30)
                << "m " << m << " n " << n << " k " << k << " ta " << int(ta) << " tb " << int(tb) << " beta "
                << ab.second << " element " << e;
        }
}

TEST(KernelsCublas, GemmAgainstPortableFloat) { gemm_against_portable<float>(); }
TEST(KernelsCublas, GemmAgainstPortableDouble) { gemm_against_portable<double>(); }

TEST(KernelsCublas, BetaZeroIgnoresNaN) {
  const auto a = random<float>(3, 5, 1), b = random<float>(5, 4, 2);
  Matrix<float> nan("nan", 3, 4);
  Kokkos::deep_copy(nan, std::numeric_limits<float>::quiet_NaN());
  for (float v : run<float>(Choice::cublas, Op::none, Op::none, 1.0f, a, b, 0.0f, nan)) EXPECT_TRUE(std::isfinite(v));
}

template <class T>
std::vector<T> bias_gemm(Choice choice, const Matrix<T>& x, const Matrix<T>& w, const Matrix<T>& bias) {
  Selected sel(choice);
  Matrix<T> y("y", x.extent(0), w.extent(1));
  Kokkos::deep_copy(y, std::numeric_limits<T>::quiet_NaN());  // written, never read
  kernels::gemm_bias<T>(ExecSpace(), x, w, bias, y);
  return test::to_host(y);
}

template <class T>
void gemm_bias_against_portable() {
  const double eps = std::numeric_limits<T>::epsilon();
  for (const auto& s : std::vector<std::array<std::int64_t, 3>>{{1, 1, 1}, {1, 10, 64}, {7, 13, 5}, {256, 192, 64}}) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    const auto x = random<T>(m, k, 6), w = random<T>(k, n, 7), bias = random<T>(1, n, 8);
    const auto ref = bias_gemm<T>(Choice::portable, x, w, bias);
    const auto got = bias_gemm<T>(Choice::cublas, x, w, bias);
    const auto bound = bias_gemm<T>(Choice::portable, absolute(x), absolute(w), absolute(bias));
    const double gamma = double(k + 1) * eps / (1 - double(k + 1) * eps);
    for (size_t e = 0; e < ref.size(); ++e)
      ASSERT_LE(std::abs(double(got[e]) - double(ref[e])), 2 * gamma * double(bound[e]) + 1e-30)
          << "m " << m << " n " << n << " k " << k << " element " << e;
  }
}

TEST(KernelsCublas, GemmBiasAgainstPortableFloat) { gemm_bias_against_portable<float>(); }
TEST(KernelsCublas, GemmBiasAgainstPortableDouble) { gemm_bias_against_portable<double>(); }

// Repeatable, and a row's bits independent of the call's row count (1, 16, 1000 rows).
TEST(KernelsCublas, DeterministicAndRowIndependent) {
  const std::int64_t n = 256, k = 784;
  const auto x = random<float>(1000, k, 9), w = random<float>(k, n, 10), bias = random<float>(1, n, 11);
  const auto all = bias_gemm<float>(Choice::cublas, x, w, bias);
  EXPECT_EQ(bias_gemm<float>(Choice::cublas, x, w, bias), all);
  for (std::int64_t rows : {1, 16}) {
    const Matrix<float> head = Kokkos::subview(x, std::make_pair(std::int64_t(0), rows), Kokkos::ALL);
    const auto part = bias_gemm<float>(Choice::cublas, head, w, bias);
    EXPECT_EQ(part, std::vector<float>(all.begin(), all.begin() + rows * n)) << rows << " rows";
    const auto plain = run<float>(Choice::cublas, Op::none, Op::none, 1.0f, head, w, 0.0f, Matrix<float>("c", rows, n));
    const auto plain_all = run<float>(Choice::cublas, Op::none, Op::none, 1.0f, x, w, 0.0f, Matrix<float>("c", 1000, n));
    EXPECT_EQ(plain, std::vector<float>(plain_all.begin(), plain_all.begin() + rows * n)) << rows << " rows";
  }
}

// Attention's layout: per (sample, head), Q K^T from an interleaved
// (samples * T, 3 * d) matrix (a two-level batch, outer stride not inner x
// inner stride), then a single-level batch.
template <class T>
void batched_against_portable() {
  const double eps = std::numeric_limits<T>::epsilon();
  const std::int64_t samples = 3, tokens = 5, heads = 2, dh = 4, d = heads * dh;
  const auto qkv = random<T>(samples * tokens, 3 * d, 12);
  const kernels::Strided q{tokens, dh, 3 * d, tokens * 3 * d, dh};
  const kernels::Strided kk{tokens, dh, 3 * d, tokens * 3 * d, dh};
  const kernels::Strided s{tokens, tokens, tokens, heads * tokens * tokens, tokens * tokens};
  std::vector<std::vector<T>> out;
  for (Choice choice : {Choice::portable, Choice::cublas}) {
    Selected sel(choice);
    Matrix<T> scores("scores", samples * heads * tokens, tokens);
    kernels::batched_gemm<T>(ExecSpace(), Op::none, Op::transpose, samples, heads, T(0.5), qkv.data(), q,
                             qkv.data() + d, kk, T(0), scores.data(), s);
    out.push_back(test::to_host(scores));
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  const double gamma = double(dh + 1) * eps / (1 - double(dh + 1) * eps);
  for (size_t e = 0; e < out[0].size(); ++e)
    EXPECT_LE(std::abs(double(out[1][e]) - double(out[0][e])), 2 * gamma * 0.5 * double(dh) + 1e-30) << e;
  // Single level: 6 independent 5 x 4 by 4 x 3 products, beta = 1.
  const auto a = random<T>(6 * 5, 4, 13), b = random<T>(6 * 4, 3, 14), c0 = random<T>(6 * 5, 3, 15);
  std::vector<std::vector<T>> flat;
  for (Choice choice : {Choice::portable, Choice::cublas}) {
    Selected sel(choice);
    Matrix<T> c("c", 30, 3);
    Kokkos::deep_copy(c, c0);
    kernels::batched_gemm<T>(ExecSpace(), Op::none, Op::none, 2, 3, T(1), a.data(), {5, 4, 4, 60, 20}, b.data(),
                             {4, 3, 3, 36, 12}, T(1), c.data(), {5, 3, 3, 45, 15});
    flat.push_back(test::to_host(c));
  }
  for (size_t e = 0; e < flat[0].size(); ++e)
    EXPECT_LE(std::abs(double(flat[1][e]) - double(flat[0][e])), 2 * gamma * 5.0 + 1e-30) << e;
}

TEST(KernelsCublas, BatchedAgainstPortableFloat) { batched_against_portable<float>(); }
TEST(KernelsCublas, BatchedAgainstPortableDouble) { batched_against_portable<double>(); }

// pipeline.tf32: every entry of A is 1 + 2^-12 (exact in fp32; TF32 keeps 10
// mantissa bits, so it becomes 1), B is all ones: each of C's n x n entries
// is 256 (1 + 2^-12) = 256.0625 exactly in fp32, and 256 with TF32 operands
// (fp32 accumulation of 256 ones). Off again: fp32, bitwise.
TEST(KernelsCublas, Tf32RoundsTheOperandsOnlyWhenAllowed) {
  if (!kernels::has_tf32(kernels::Implementation::cublas, kernels::Primitive::gemm))
    GTEST_SKIP() << "no TF32 on this GPU (compute capability < 8.0)";
  const std::int64_t n = 256;
  const float one_plus = 1.0f + std::ldexp(1.0f, -12);
  const auto a = test::to_device(std::vector<float>(size_t(n * n), one_plus), n, n);
  const auto b = test::to_device(std::vector<float>(size_t(n * n), 1.0f), n, n);
  const Matrix<float> zero("c0", n, n);
  kernels::set_tf32(false);
  for (float v : run<float>(Choice::cublas, Op::none, Op::none, 1.0f, a, b, 0.0f, zero)) ASSERT_EQ(v, 256.0625f);
  kernels::set_tf32(true);
  EXPECT_TRUE(kernels::uses_tf32(kernels::Primitive::gemm) || std::getenv("GPIPE_KERNELS"));
  {
    Selected s(Choice::cublas);
    EXPECT_EQ(kernels::tf32_summary(), "tf32 on: gemm, gemm_bias, batched_gemm");
  }
  for (float v : run<float>(Choice::cublas, Op::none, Op::none, 1.0f, a, b, 0.0f, zero)) ASSERT_EQ(v, 256.0f);
  // Double never uses TF32.
  const auto ad = test::to_device(std::vector<double>(size_t(n * n), double(one_plus)), n, n);
  const auto bd = test::to_device(std::vector<double>(size_t(n * n), 1.0), n, n);
  const Matrix<double> zerod("c0", n, n);
  for (double v : run<double>(Choice::cublas, Op::none, Op::none, 1.0, ad, bd, 0.0, zerod)) ASSERT_EQ(v, 256.0625);
  kernels::set_tf32(false);
  for (float v : run<float>(Choice::cublas, Op::none, Op::none, 1.0f, a, b, 0.0f, zero)) ASSERT_EQ(v, 256.0625f);
  EXPECT_NE(kernels::build_summary().find("; TF32 (pipeline.tf32): cublas"), std::string::npos)
      << kernels::build_summary();
}

// The memory model counts cuBLAS's workspace (a 32 MiB Kokkos View, one per
// stream, made at the first cuBLAS GEMM) where the deck's GEMMs run on it.
TEST(KernelsCublas, MemoryModelCountsItsWorkspace) {
  if (std::getenv("GPIPE_KERNELS")) GTEST_SKIP() << "GPIPE_KERNELS overrides the deck's choice";
  const std::string mlp =
      "seed: 1\nmodel:\n  input: 6\n  layers: [{type: dense, units: 5}, {type: relu}, {type: dense, units: 3}]\n"
      "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
      "training: {epochs: 1, batch_size: 8, micro_batches: 2}\noptimizer: {type: sgd, lr: 0.1}\n";
  const RunPlan portable = plan_run(parse_deck("kernels: portable\n" + mlp, "deck.yaml"), 1);
  const RunPlan cublas = plan_run(parse_deck("kernels: cublas\n" + mlp, "deck.yaml"), 1);
  kernels::select(Choice::automatic);
  EXPECT_EQ(kernels::cublas_workspace_bytes(), std::int64_t(32) << 20);
  EXPECT_EQ(cublas.memory[0].workspaces - portable.memory[0].workspaces, std::int64_t(32) << 20);
}

}  // namespace
}  // namespace gpipe

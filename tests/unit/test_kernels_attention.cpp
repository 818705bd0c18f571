// The kernel seam's scaled-dot-product attention
// (gpipe/kernels/attention.hpp): the portable reference on a hand-computed
// case (causal and not), causality (token t's output ignores tokens after
// t), every implementation against portable on edge shapes (T = 1, heads =
// 1, width-1 heads, odd sizes, the ViT deck's shape; causal and not), forward
// and every gradient, with tolerances from epsilon and the reduction lengths
// (dh for the scores, T for the softmax and P V); and, per implementation,
// that a sample's results do not depend on how many samples a call has
// (bitwise), which "bitwise across M" needs. Gradients against finite
// differences: tests/unit/test_transformer.cpp (transformer_block, causal
// and not, in double).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/kernel_choice.hpp"
#include "../common/test_util.hpp"
#include "gpipe/kernels/attention.hpp"
#include "gpipe/kernels/backend.hpp"

namespace gpipe {
namespace {

using kernels::AttentionShape;
using kernels::Choice;

std::vector<Choice> forced_choices() {
  std::vector<Choice> out;
  for (auto i : kernels::available()) out.push_back(test::forcing(i));
  return out;
}

struct Selected {
  explicit Selected(Choice c) { kernels::select(c); }
  ~Selected() { kernels::select(Choice::automatic); }
};

template <class T>
struct Result {
  std::vector<T> probs, out, dqkv;
};

template <class T>
Result<T> run(Choice choice, const AttentionShape& s, const std::vector<T>& qkv, const std::vector<T>& dout) {
  Selected sel(choice);
  const std::int64_t N = s.samples * s.tokens, d = s.heads * s.head_width, P = s.samples * s.heads * s.tokens;
  const auto q = test::to_device(qkv, N, 3 * d);
  Matrix<T> probs("probs", P, s.tokens), out("out", N, d), work("work", P, s.tokens), dq("dqkv", N, 3 * d);
  kernels::attention_forward<T>(ExecSpace(), s, q, probs, out);
  kernels::attention_backward<T>(ExecSpace(), s, q, probs, test::to_device(dout, N, d), work, dq);
  return {test::to_host(probs), test::to_host(out), test::to_host(dq)};
}

template <class T>
std::vector<T> values(std::size_t count, std::uint64_t seed, double scale = 1) {
  const auto d = test::uniform(count, seed, -scale, scale);
  return std::vector<T>(d.begin(), d.end());
}

TEST(KernelsAttention, KnownSmallCase) {
  // One sample, T = 2, one head of width 1 (scale 1): q = (1, 0.5), k = (2, -1), v = (3, 5).
  const std::vector<double> qkv{1, 2, 3, 0.5, -1, 5};
  const std::vector<double> dout{1, 0};
  for (bool causal : {false, true}) {
    const AttentionShape s{1, 2, 1, 1, causal};
    const auto r = run<double>(Choice::portable, s, qkv, dout);
    // S = [2 -1; 1 -0.5].
    const double p01 = causal ? 0.0 : 1.0 / (std::exp(3.0) + 1), p00 = 1 - p01;
    const double p11 = 1.0 / (std::exp(1.5) + 1), p10 = 1 - p11;
    EXPECT_NEAR(r.probs[0], p00, 1e-15);
    if (causal) EXPECT_EQ(r.probs[1], 0.0);  // exactly 0 when masked
    EXPECT_NEAR(r.probs[1], p01, 1e-16);
    EXPECT_NEAR(r.probs[2], p10, 1e-15);
    EXPECT_NEAR(r.probs[3], p11, 1e-15);
    EXPECT_NEAR(r.out[0], 3 * p00 + 5 * p01, 1e-14);
    EXPECT_NEAR(r.out[1], 3 * p10 + 5 * p11, 1e-14);
    // dO = (1, 0): dV = P^T dO = (p00, p01); dP row 0 = v = (3, 5), dS0 = P0 .* (dP0 - P0 . dP0);
    // dQ0 = dS0 . k; dK = dS^T q (row 1's dS is 0).
    const double dot = p00 * 3 + p01 * 5, ds00 = p00 * (3 - dot), ds01 = p01 * (5 - dot);
    EXPECT_NEAR(r.dqkv[2], p00, 1e-15);                 // dV token 0
    EXPECT_NEAR(r.dqkv[5], p01, 1e-15);                 // dV token 1
    EXPECT_NEAR(r.dqkv[0], ds00 * 2 + ds01 * -1, 1e-14);  // dQ token 0
    EXPECT_EQ(r.dqkv[3], 0.0);                            // dQ token 1 (its dO is 0)
    EXPECT_NEAR(r.dqkv[1], ds00 * 1, 1e-14);              // dK token 0
    EXPECT_NEAR(r.dqkv[4], ds01 * 1, 1e-14);              // dK token 1
    if (causal) EXPECT_EQ(r.dqkv[4], 0.0);
  }
}

TEST(KernelsAttention, CausalOutputIgnoresLaterTokens) {
  const AttentionShape s{2, 6, 2, 3, true};
  const std::int64_t cols = 3 * 6;
  auto qkv = values<double>(size_t(s.samples * s.tokens * cols), 5);
  const auto dout = values<double>(size_t(s.samples * s.tokens * 6), 6);
  for (Choice choice : forced_choices()) {
    const auto before = run<double>(choice, s, qkv, dout);
    auto changed = qkv;
    for (std::int64_t c = 0; c < cols; ++c) changed[size_t((0 * 6 + 4) * cols + c)] += 0.5;  // sample 0, token 4
    const auto after = run<double>(choice, s, changed, dout);
    for (std::int64_t t = 0; t < 4; ++t)
      for (std::int64_t c = 0; c < 6; ++c)
        EXPECT_EQ(before.out[size_t(t * 6 + c)], after.out[size_t(t * 6 + c)]) << t << " " << c;
    EXPECT_NE(before.out[size_t(4 * 6)], after.out[size_t(4 * 6)]);
  }
}

template <class T>
void against_portable() {
  const double eps = std::numeric_limits<T>::epsilon();
  const std::vector<AttentionShape> shapes = {{1, 1, 1, 1}, {3, 1, 2, 3}, {2, 5, 1, 7}, {2, 17, 3, 5}, {4, 16, 4, 16}};
  for (AttentionShape s : shapes)
    for (bool causal : {false, true}) {
      s.causal = causal;
      const std::int64_t N = s.samples * s.tokens, d = s.heads * s.head_width;
      const auto qkv = values<T>(size_t(N * 3 * d), 7, 2.0);
      const auto dout = values<T>(size_t(N * d), 8);
      const auto ref = run<T>(Choice::portable, s, qkv, dout);
      // |q|, |k| <= 2: scores err <= gamma_dh * 4 dh / sqrt(dh); exp amplifies an absolute score error
      // into a relative error of P; P V and the backward GEMMs add gamma_T and gamma_dh.
      const double k = double(s.head_width + s.tokens + 2);
      const double tol = 8 * k * eps * (1 + 4 * std::sqrt(double(s.head_width))) * double(s.tokens);
      for (Choice choice : forced_choices()) {
        if (choice == Choice::onednn && !kernels::has(kernels::Implementation::onednn, kernels::Primitive::attention, int(sizeof(T))))
          continue;
        const auto got = run<T>(choice, s, qkv, dout);
        const auto compare = [&](const std::vector<T>& a, const std::vector<T>& b, const char* what) {
          for (size_t e = 0; e < a.size(); ++e)
            ASSERT_LE(std::abs(double(a[e]) - double(b[e])), tol)
                << what << " " << kernels::name(choice) << " n " << s.samples << " T " << s.tokens << " H "
                << s.heads << " dh " << s.head_width << " causal " << causal << " element " << e;
        };
        compare(got.probs, ref.probs, "P");
        compare(got.out, ref.out, "O");
        compare(got.dqkv, ref.dqkv, "dQKV");
        if (causal)  // masked probabilities are exactly 0 in every implementation
          for (std::int64_t r = 0; r < s.samples * s.heads * s.tokens; ++r)
            for (std::int64_t c = r % s.tokens + 1; c < s.tokens; ++c)
              ASSERT_EQ(got.probs[size_t(r * s.tokens + c)], T(0));
      }
    }
}

TEST(KernelsAttention, EveryImplementationAgainstPortableFloat) { against_portable<float>(); }
TEST(KernelsAttention, EveryImplementationAgainstPortableDouble) { against_portable<double>(); }

TEST(KernelsAttention, SamplesIndependentOfSampleCount) {
  for (Choice choice : forced_choices())
    for (bool causal : {false, true}) {
      const AttentionShape all{16, 16, 4, 16, causal};
      const std::int64_t d = 64, row = 16 * 3 * d;
      const auto qkv = values<float>(size_t(16 * row), 9);
      const auto dout = values<float>(size_t(16 * 16 * d), 10);
      const auto full = run<float>(choice, all, qkv, dout);
      for (std::int64_t n : {1, 2, 5}) {
        AttentionShape part = all;
        part.samples = n;
        const auto r = run<float>(choice, part, std::vector<float>(qkv.begin(), qkv.begin() + n * row),
                                  std::vector<float>(dout.begin(), dout.begin() + n * 16 * d));
        ASSERT_TRUE(std::equal(r.out.begin(), r.out.end(), full.out.begin())) << kernels::name(choice) << " n " << n;
        ASSERT_TRUE(std::equal(r.probs.begin(), r.probs.end(), full.probs.begin())) << kernels::name(choice);
        ASSERT_TRUE(std::equal(r.dqkv.begin(), r.dqkv.end(), full.dqkv.begin())) << kernels::name(choice) << " n " << n;
      }
      const auto again = run<float>(choice, all, qkv, dout);
      EXPECT_EQ(again.dqkv, full.dqkv) << "repeat " << kernels::name(choice);
    }
}

TEST(KernelsAttention, ShapeError) {
  Matrix<float> qkv("qkv", 4, 9), probs("p", 4, 3), out("o", 4, 3);
  try {
    kernels::attention_forward<float>(ExecSpace(), AttentionShape{2, 2, 1, 3}, qkv, probs, out);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gpipe::kernels::attention: n 2 T 2 H 1 dh 3: qkv (4, 9) (expected (4, 9)), probs (4, 3) "
                           "(expected (4, 2)), output (4, 3) (expected (4, 3))");
  }
}

}  // namespace
}  // namespace gpipe

// Dropout masks come from a counter-based RNG: recomputation reproduces them.

#include <gtest/gtest.h>

#include "../common/test_util.hpp"
#include "gpipe/layers/dropout.hpp"

namespace gpipe {
namespace {

Dropout<double> make(std::int64_t index, std::int64_t features, double rate) {
  const auto spec = parse_layer("{type: dropout, rate: " + std::to_string(rate) + "}");
  return Dropout<double>(layer_shape(spec, Shape{features}, index));
}

std::vector<double> run(Dropout<double>& d, const PassContext& ctx, std::int64_t rows,
                        std::int64_t offset_rows = 0) {
  const std::int64_t f = d.in_features();
  std::vector<double> ones(size_t(rows * f), 1.0);
  Matrix<double> y("y", rows, f);
  PassContext c = ctx;
  c.sample_offset += offset_rows;
  d.forward(c, test::to_device(ones, rows, f), y);
  return test::to_host(y);
}

TEST(Dropout, RecomputeReproducesMaskBitwise) {
  Dropout<double> d = make(3, 64, 0.3);
  const PassContext ctx{42, 7, 0, true};
  EXPECT_EQ(run(d, ctx, 16), run(d, ctx, 16));
}

TEST(Dropout, MaskDependsOnSeedStepAndLayer) {
  Dropout<double> d = make(3, 64, 0.3), other = make(4, 64, 0.3);
  const PassContext ctx{42, 7, 0, true};
  const auto base = run(d, ctx, 8);
  EXPECT_NE(base, run(d, {43, 7, 0, true}, 8));
  EXPECT_NE(base, run(d, {42, 8, 0, true}, 8));
  EXPECT_NE(base, run(other, ctx, 8));
}

TEST(Dropout, MaskIndependentOfMicroBatchSplit) {
  // Rows 4..7 of one 8-row pass equal a 4-row pass whose micro-batch starts at sample 4.
  Dropout<double> d = make(1, 32, 0.5);
  const PassContext ctx{1, 2, 0, true};
  const auto whole = run(d, ctx, 8);
  const auto second_half = run(d, ctx, 4, 4);
  EXPECT_EQ(std::vector<double>(whole.begin() + 4 * 32, whole.end()), second_half);
}

TEST(Dropout, KeepsAboutOneMinusRateAndScales) {
  Dropout<double> d = make(0, 1000, 0.25);
  const auto y = run(d, {9, 0, 0, true}, 40);
  std::int64_t kept = 0;
  for (double v : y) {
    if (v != 0) {
      EXPECT_DOUBLE_EQ(v, 1.0 / 0.75);
      ++kept;
    }
  }
  const double fraction = double(kept) / double(y.size());
  EXPECT_NEAR(fraction, 0.75, 0.01);  // 40000 Bernoulli draws: sd 0.002
}

TEST(Dropout, EvaluationIsIdentity) {
  Dropout<double> d = make(0, 10, 0.9);
  const auto y = run(d, {9, 0, 0, false}, 3);
  EXPECT_EQ(y, std::vector<double>(30, 1.0));
}

}  // namespace
}  // namespace gpipe

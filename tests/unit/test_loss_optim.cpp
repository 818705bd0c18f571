// Softmax cross-entropy and optimizer steps against hand-computed values.

#include <gtest/gtest.h>

#include <cmath>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/layers/softmax_cross_entropy.hpp"
#include "gpipe/optim/optimizer.hpp"

namespace gpipe {
namespace {

using test::labels;

TEST(SoftmaxCrossEntropy, HandComputedLossAndGradient) {
  // Row 0: logits (1, 2, 3), label 2: loss = log(e + e^2 + e^3) - 3.
  // Row 1: logits (1, 1, 1), label 0: loss = log 3.
  const auto z = test::to_device<double>({1, 2, 3, 1, 1, 1}, 2, 3);
  Matrix<double> dz("dz", 2, 3);
  SoftmaxCrossEntropy<double> loss;
  const LossSums s = loss.evaluate(z, labels({2, 0}), 0.5, dz);
  EXPECT_NEAR(s.loss, 0.40760596444438013 + 1.0986122886681098, 1e-14);
  EXPECT_EQ(s.correct, 2);  // row 0: arg-max 2; row 1: ties resolve to the first class, 0
  const auto g = test::to_host(dz);
  const double p[3] = {0.09003057317038048, 0.2447284710547977, 0.665240955774822};
  EXPECT_NEAR(g[0], 0.5 * p[0], 1e-15);
  EXPECT_NEAR(g[1], 0.5 * p[1], 1e-15);
  EXPECT_NEAR(g[2], 0.5 * (p[2] - 1), 1e-15);
  EXPECT_NEAR(g[3], 0.5 * (1.0 / 3 - 1), 1e-15);
  EXPECT_NEAR(g[4], 0.5 / 3, 1e-15);
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  const auto z = test::to_device<double>({1000, 0, -1000}, 1, 3);
  SoftmaxCrossEntropy<double> loss;
  const LossSums s = loss.evaluate(z, labels({1}), 1.0, Matrix<double>());
  EXPECT_NEAR(s.loss, 1000.0, 1e-12);
  EXPECT_EQ(s.correct, 0);
}

TEST(SoftmaxCrossEntropy, LabelOutOfRangeThrows) {
  const auto z = test::to_device<double>({0, 0}, 1, 2);
  SoftmaxCrossEntropy<double> loss;
  try {
    loss.evaluate(z, labels({2}), 1.0, Matrix<double>());
    FAIL() << "expected PipelineError";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "softmax cross-entropy: 1 label(s) outside [0, 2)");
  }
}

Vector<double> vec(const std::vector<double>& v) {
  Vector<double> out("v", v.size());
  auto h = Kokkos::create_mirror_view(out);
  for (size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(out, h);
  return out;
}

TEST(Optimizer, SgdMomentumTwoSteps) {
  OptimizerSpec spec;
  spec.type = "sgd";
  spec.momentum = 0.9;
  spec.weight_decay = 0.1;
  auto opt = make_optimizer<double>(spec, 2);
  auto p = vec({1.0, -2.0});
  const auto g = vec({0.5, 0.25});
  opt->step(p, g, 0.1);
  // v = g + wd p = (0.6, 0.05); p = p - 0.1 v = (0.94, -2.005)
  auto h = test::to_host(p);
  EXPECT_NEAR(h[0], 0.94, 1e-15);
  EXPECT_NEAR(h[1], -2.005, 1e-15);
  opt->step(p, g, 0.1);
  // v = 0.9 v + g + wd p = (0.54 + 0.5 + 0.094, 0.045 + 0.25 - 0.2005) = (1.134, 0.0945)
  h = test::to_host(p);
  EXPECT_NEAR(h[0], 0.94 - 0.1134, 1e-15);
  EXPECT_NEAR(h[1], -2.005 - 0.00945, 1e-15);
  EXPECT_EQ(opt->steps(), 2);
}

TEST(Optimizer, AdamFirstStepsMatchAlgorithm1) {
  OptimizerSpec spec;
  spec.type = "adam";
  spec.beta1 = 0.9;
  spec.beta2 = 0.999;
  spec.eps = 1e-8;
  auto opt = make_optimizer<double>(spec, 1);
  auto p = vec({1.0});
  opt->step(p, vec({0.2}), 0.01);
  // t=1: m = 0.02, v = 4e-5; mhat = 0.2, vhat = 0.04; p -= 0.01 * 0.2 / (0.2 + 1e-8)
  const double p1 = 1.0 - 0.01 * 0.2 / (0.2 + 1e-8);
  EXPECT_NEAR(test::to_host(p)[0], p1, 1e-15);
  opt->step(p, vec({-0.1}), 0.01);
  const double m = 0.9 * 0.02 + 0.1 * -0.1, v = 0.999 * 4e-5 + 0.001 * 0.01;
  const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
  EXPECT_NEAR(test::to_host(p)[0], p1 - 0.01 * mhat / (std::sqrt(vhat) + 1e-8), 1e-15);
}

TEST(Optimizer, AdamWDecouplesWeightDecay) {
  OptimizerSpec spec;
  spec.type = "adamw";
  spec.weight_decay = 0.5;
  auto opt = make_optimizer<double>(spec, 1);
  auto p = vec({2.0});
  opt->step(p, vec({0.0}), 0.1);  // zero gradient: only the decay acts
  EXPECT_NEAR(test::to_host(p)[0], 2.0 - 0.1 * 0.5 * 2.0, 1e-15);
}

TEST(Optimizer, BadSpecsThrowNamedErrors) {
  OptimizerSpec spec;
  spec.type = "rmsprop";
  try {
    make_optimizer<double>(spec, 1);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "optimizer.type: unknown optimizer 'rmsprop' (expected one of: sgd, adam, adamw)");
  }
  spec.type = "adam";
  spec.lr = -1;
  EXPECT_THROW(make_optimizer<double>(spec, 1), InputError);
}

TEST(Optimizer, CosineSchedule) {
  OptimizerSpec spec;
  spec.lr = 0.2;
  spec.schedule = "cosine";
  EXPECT_DOUBLE_EQ(learning_rate(spec, 0, 10), 0.2);
  EXPECT_NEAR(learning_rate(spec, 5, 10), 0.1, 1e-15);
  spec.schedule = "constant";
  EXPECT_EQ(learning_rate(spec, 5, 10), 0.2);
}

}  // namespace
}  // namespace gpipe

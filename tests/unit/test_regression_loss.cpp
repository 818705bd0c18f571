// Regression losses (mse, mae, huber) and metrics against hand values; the
// mae and huber gradients against central finite differences.

#include <gtest/gtest.h>

#include <cmath>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/loss/loss.hpp"

namespace gpipe {
namespace {

// outputs (1, 2; 3, -1), targets (0, 2; 1, 1): errors e = (1, 0; 2, -2).
struct Case {
  Matrix<double> out = test::to_device<double>({1, 2, 3, -1}, 2, 2);
  Matrix<double> y = test::to_device<double>({0, 2, 1, 1}, 2, 2);
};

LossSums run(const std::string& type, double delta, std::vector<double>* grad) {
  Case c;
  LossSpec spec;
  spec.type = type;
  spec.huber_delta = delta;
  Matrix<double> g("g", 2, 2);
  const LossSums s = make_loss<double>(spec)->evaluate(c.out, ConstMatrix<double>(c.y), 0.5, g);
  *grad = test::to_host(g);
  return s;
}

TEST(RegressionLoss, MseHandValues) {
  std::vector<double> g;
  const LossSums s = run("mse", 1, &g);
  EXPECT_DOUBLE_EQ(s.loss, (1 + 0) / 2.0 + (4 + 4) / 2.0);  // mean over outputs, summed over rows
  // dL/dout = scale * (1/p) * 2e = 0.5 * e
  EXPECT_EQ(g, (std::vector<double>{0.5, 0, 1, -1}));
  // moments per output: sum e^2, sum |e|, sum y, sum y^2
  EXPECT_EQ(s.moments, (std::vector<double>{5, 3, 1, 1, 4, 2, 3, 5}));
}

TEST(RegressionLoss, MaeHandValues) {
  std::vector<double> g;
  const LossSums s = run("mae", 1, &g);
  EXPECT_DOUBLE_EQ(s.loss, 0.5 + 2.0);
  EXPECT_EQ(g, (std::vector<double>{0.25, 0, 0.25, -0.25}));  // sign(0) = 0
}

TEST(RegressionLoss, HuberHandValues) {
  std::vector<double> g;
  // delta 1.5: l(1) = 0.5, l(0) = 0, l(+-2) = 1.5 (2 - 0.75) = 1.875
  const LossSums s = run("huber", 1.5, &g);
  EXPECT_DOUBLE_EQ(s.loss, 0.25 + 1.875);
  EXPECT_EQ(g, (std::vector<double>{0.25, 0, 0.375, -0.375}));  // 0.25 * clamp(e, -1.5, 1.5)
}

TEST(RegressionLoss, BadTargetsAndSpecs) {
  Case c;
  LossSpec mse;
  mse.type = "mse";
  EXPECT_THROW(make_loss<double>(mse)->evaluate(c.out, Targets<double>(), 1.0, Matrix<double>()),
               PipelineError);
  LossSpec ce;  // classification needs labels
  EXPECT_THROW(make_loss<double>(ce)->evaluate(c.out, ConstMatrix<double>(c.y), 1.0, Matrix<double>()),
               PipelineError);
  LossSpec bad;
  bad.type = "hinge";
  try {
    make_loss<double>(bad);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "model.loss: unknown loss 'hinge' (expected softmax_cross_entropy, token_cross_entropy, mse, "
                           "mae or huber)");
  }
  LossSpec huber;
  huber.type = "huber";
  huber.huber_delta = 0;
  EXPECT_THROW(make_loss<double>(huber), InputError);
}

// Central finite differences of scale * sum_i loss_i against the analytic gradient.
void check_gradient(const std::string& type, double delta) {
  const std::int64_t n = 5, p = 3;
  auto x = test::uniform(size_t(n * p), 11, -3, 3);
  const auto y = test::uniform(size_t(n * p), 12, -3, 3);
  for (size_t k = 0; k < x.size(); ++k) {  // keep away from the kinks (e = 0, |e| = delta)
    const double e = x[k] - y[k];
    if (std::abs(e) < 0.05 || std::abs(std::abs(e) - delta) < 0.05) x[k] += 0.2;
  }
  LossSpec spec;
  spec.type = type;
  spec.huber_delta = delta;
  auto loss = make_loss<double>(spec);
  const double scale = 1.0 / double(n);
  const auto ty = test::to_device<double>(y, n, p);
  Matrix<double> g("g", n, p);
  loss->evaluate(test::to_device<double>(x, n, p), ConstMatrix<double>(ty), scale, g);
  const auto analytic = test::to_host(g);
  const double h = 1e-6;
  for (size_t k = 0; k < x.size(); ++k) {
    auto up = x, down = x;
    up[k] += h;
    down[k] -= h;
    const double lu = loss->evaluate(test::to_device<double>(up, n, p), ConstMatrix<double>(ty), scale,
                                     Matrix<double>()).loss;
    const double ld = loss->evaluate(test::to_device<double>(down, n, p), ConstMatrix<double>(ty),
                                     scale, Matrix<double>()).loss;
    EXPECT_NEAR(analytic[k], scale * (lu - ld) / (2 * h), 1e-8) << type << " element " << k;
  }
}

TEST(RegressionLoss, HuberGradientMatchesFiniteDifferences) { check_gradient("huber", 1.0); }
TEST(RegressionLoss, MaeGradientMatchesFiniteDifferences) { check_gradient("mae", 1.0); }
TEST(RegressionLoss, MseGradientMatchesFiniteDifferences) { check_gradient("mse", 1.0); }

TEST(RegressionMetrics, HandValues) {
  const std::vector<double> moments{5, 3, 1, 1, 4, 2, 3, 5};  // the MseHandValues case, n = 2
  const auto m = regression_metrics(moments, 2);
  EXPECT_DOUBLE_EQ(m.rmse[0], std::sqrt(2.5));
  EXPECT_DOUBLE_EQ(m.rmse[1], std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(m.mae[0], 1.5);
  EXPECT_DOUBLE_EQ(m.mae[1], 1.0);
  EXPECT_DOUBLE_EQ(m.r2[0], 1 - 5 / 0.5);  // SStot = 1 - 1^2 / 2
  EXPECT_DOUBLE_EQ(m.r2[1], 1 - 4 / 0.5);  // SStot = 5 - 3^2 / 2
  EXPECT_DOUBLE_EQ(m.rmse_all, 1.5);
  EXPECT_DOUBLE_EQ(m.mae_all, 1.25);
  EXPECT_DOUBLE_EQ(m.r2_all, 1 - 9 / 1.0);
  // Targets standardized with std (2, 1): RMSE and MAE in the data's units, R^2 unchanged.
  const auto s = regression_metrics(moments, 2, {2, 1});
  EXPECT_DOUBLE_EQ(s.rmse[0], std::sqrt(10.0));
  EXPECT_DOUBLE_EQ(s.mae[0], 3.0);
  EXPECT_DOUBLE_EQ(s.r2[0], m.r2[0]);
  EXPECT_DOUBLE_EQ(s.rmse_all, std::sqrt(6.0));
  EXPECT_DOUBLE_EQ(s.r2_all, 1 - 24 / 2.5);
  // A perfect fit; a constant target has R^2 = 0.
  const auto p = regression_metrics({0, 0, 4, 10, 0, 0, 2, 2}, 2);  // y = (1, 3) and (1, 1)
  EXPECT_DOUBLE_EQ(p.r2[0], 1.0);
  EXPECT_DOUBLE_EQ(p.r2[1], 0.0);
  EXPECT_TRUE(regression_metrics({}, 2).rmse.empty());
  // Nothing measured (every step of an epoch skipped): no figure, never 0.
  EXPECT_TRUE(std::isnan(regression_metrics({}, 2).rmse_all));
  const auto none = regression_metrics({1, 1, 1, 1}, 0);
  EXPECT_TRUE(std::isnan(none.rmse_all) && std::isnan(none.mae_all) && std::isnan(none.r2_all));
  EXPECT_TRUE(none.rmse.empty());
}

TEST(RegressionDeck, LossKeysAndErrors) {
  const std::string base =
      "model:\n  input: 2\n  layers: [{type: dense, units: 3}]\n  loss: {}\n"
      "data: {format: hdf5, train_file: a.h5, test_file: b.h5{}}\n"
      "training: {epochs: 1, batch_size: 4}\n";
  auto deck = [&](const std::string& loss, const std::string& data = "") {
    std::string t = base;
    t.replace(t.find("{}"), 2, loss);
    t.replace(t.find("{}"), 2, data);
    return parse_deck(t, "deck.yaml");
  };
  const Deck d = deck("huber\n  huber_delta: 0.5", ", targets_dataset: y, normalize_targets: standardize");
  EXPECT_EQ(d.model.loss.type, "huber");
  EXPECT_EQ(d.model.loss.huber_delta, 0.5);
  EXPECT_TRUE(d.data.regression);
  EXPECT_EQ(d.data.targets_dataset, "y");
  EXPECT_EQ(d.data.normalize_targets, "standardize");
  std::string mse = base;  // --set model.loss
  mse.replace(mse.find("{}"), 2, "mse");
  mse.replace(mse.find("{}"), 2, "");
  EXPECT_EQ(parse_deck(mse, "deck.yaml", {"model.loss=mae"}).model.loss.type, "mae");
  auto error = [&](const std::string& loss, const std::string& data = "") {
    try {
      deck(loss, data);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("hinge"), "deck.yaml:4:9: model.loss: expected softmax_cross_entropy, token_cross_entropy, mse, mae or "
                            "huber, got 'hinge'");
  EXPECT_EQ(error("mse\n  huber_delta: 2"),
            "deck.yaml:5:16: model.huber_delta: only the huber loss has a delta (model.loss is mse)");
  EXPECT_EQ(error("huber\n  huber_delta: -1"),
            "deck.yaml:5:16: model.huber_delta: expected a finite number > 0, got -1");
  EXPECT_EQ(error("softmax_cross_entropy", ", normalize_targets: standardize"),
            "deck.yaml:5:76: data.normalize_targets: only regression losses read float targets "
            "(model.loss is softmax_cross_entropy)");
}

}  // namespace
}  // namespace gpipe

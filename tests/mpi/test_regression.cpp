// Regression through the pipeline (ctest runs this at 1, 2, 3 and 4 ranks):
// a sin/cos surrogate trained on generated data reaches a stated RMSE;
// inference from a K = 2 checkpoint on 1 and 3 ranks equals the training
// run's predictions bitwise, normalization included.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../common/mpi_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/train/restart.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

// x uniform-ish in [-pi, pi] (a fixed quasi-random sequence), targets
// (sin x, cos x): 2 outputs.
Dataset sin_cos(std::int64_t samples, double shift) {
  Dataset d;
  d.name = d.labels_name = "sin_cos";
  d.samples = samples;
  d.features = 1;
  d.outputs = 2;
  for (std::int64_t i = 0; i < samples; ++i) {
    const double u = std::fmod(double(i) * 0.6180339887498949 + shift, 1.0);
    const double x = -M_PI + 2 * M_PI * u;
    d.inputs.push_back(float(x));
    d.targets.push_back(float(std::sin(x)));
    d.targets.push_back(float(std::cos(x)));
  }
  return d;
}

std::string deck_text(const std::string& precision, std::int64_t epochs, std::int64_t batch, int M) {
  return "seed: 3\nprecision: " + precision +
         "\nmodel:\n  input: 1\n  loss: mse\n"
         "  layers: [{type: dense, units: 32}, {type: tanh}, {type: dense, units: 32}, {type: tanh}, "
         "{type: dense, units: 2}]\n"
         "data: {format: hdf5, train_file: a.h5, test_file: b.h5}\n"
         "training: {epochs: " + std::to_string(epochs) + ", batch_size: " + std::to_string(batch) +
         ", micro_batches: " + std::to_string(M) + "}\n"
         "optimizer: {type: adam, lr: 0.01, schedule: cosine}\n";
}

// The bound this test states: RMSE < 0.03 on sin and cos (amplitude 1)
// after 40 epochs of 512 samples (measured: see the assertion message).
TEST(Regression, SinCosSurrogateReachesRmseBound) {
  const Deck deck = parse_deck(deck_text("double", 40, 32, 2), "sin_cos.yaml");
  Pipeline<double> p(deck, MPI_COMM_WORLD);
  const Dataset train = sin_cos(512, 0.0), test = sin_cos(200, 0.5);
  const auto reports = fit(p, train, test, nullptr);
  ASSERT_EQ(reports.size(), 40u);
  const auto& m = reports.back().test.regression;
  ASSERT_EQ(m.rmse.size(), 2u);
  if (world_rank() == 0) std::printf("sin/cos surrogate: test RMSE %.5f, R^2 %.6f\n", m.rmse_all, m.r2_all);
  EXPECT_LT(m.rmse_all, 0.03) << "measured test RMSE " << m.rmse_all;
  EXPECT_GT(m.r2_all, 0.99);
  EXPECT_LT(reports.back().test.loss, reports.front().test.loss);
  // The loss is the mean of e^2 over outputs: RMSE^2 in these (unscaled) units.
  EXPECT_NEAR(reports.back().test.loss, m.rmse_all * m.rmse_all, 1e-9);
}

// A run stopped mid-epoch (a checkpoint after 3 of the epoch's 6 steps)
// and restarted reports the epoch's train metrics over the whole epoch,
// bitwise those of an uninterrupted run: the checkpoint carries the epoch's
// error moments so far, as it carries the loss.
TEST(Regression, TrainMetricsAfterAMidEpochRestartCoverTheWholeEpoch) {
  const std::string dir = ::testing::TempDir() + "gpipe_regression_restart_" + std::to_string(world_size());
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Deck deck = parse_deck(deck_text("double", 1, 8, 2), "restart.yaml");
  deck.training.progress_every = 0;
  const Dataset train = sin_cos(48, 0.0), test = sin_cos(16, 0.5);
  Pipeline<double> whole(deck, MPI_COMM_WORLD);
  const auto uninterrupted = fit(whole, train, test, nullptr);
  ASSERT_EQ(uninterrupted.size(), 1u);

  deck.checkpoint.directory = dir;
  deck.checkpoint.every_epochs = 0;
  {
    Pipeline<double> first(deck, MPI_COMM_WORLD);
    Driver<double> driver(first, nullptr);
    driver.set_stop([&] { return first.steps_done() == 3; });  // a batch system's signal
    EXPECT_TRUE(driver.fit(train, test).empty());
  }
  Pipeline<double> second(deck, MPI_COMM_WORLD);
  const auto latest = find_latest_checkpoint(dir, deck.model, deck.precision, deck.optimizer.type,
                                             MPI_COMM_WORLD);
  const CheckpointInfo info = second.load_checkpoint(latest.path);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(info.epoch_metric_samples, 24);
  EXPECT_EQ(info.epoch_metric_moments.size(), 8u);  // 4 per output
  second.set_position(restart_position(info, latest.path, deck, train.samples));
  const auto resumed = fit(second, train, test, nullptr);
  ASSERT_EQ(resumed.size(), 1u);
  const auto &a = uninterrupted[0], &b = resumed[0];
  EXPECT_EQ(b.train_metric_samples, 48);
  EXPECT_EQ(b.train_samples, 48);
  EXPECT_EQ(b.train_metrics.rmse_all, a.train_metrics.rmse_all);
  EXPECT_EQ(b.train_metrics.mae_all, a.train_metrics.mae_all);
  EXPECT_EQ(b.train_metrics.r2_all, a.train_metrics.r2_all);
  EXPECT_EQ(b.train_metrics.rmse, a.train_metrics.rmse);
  EXPECT_EQ(b.train_loss, a.train_loss);
  EXPECT_EQ(b.test.regression.rmse_all, a.test.regression.rmse_all);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

// data.normalize: standardize_per_feature: predict applies each feature's
// mean and std (the same bits as feeding pre-standardized inputs to an
// identity-normalized copy), and a checkpoint carries them.
TEST(Regression, PerFeatureNormalizationIsAppliedByPredictAndCheckpointed) {
  std::string text = deck_text("float", 1, 8, 2);
  text.replace(text.find("input: 1"), 8, "input: 2");
  const Deck deck = parse_deck(text, "d");
  NormalizationStats stats;
  stats.input_feature_mean = {1.0, -200.0};
  stats.input_feature_std = {0.5, 40.0};
  std::vector<float> raw, standardized;
  for (int i = 0; i < 11; ++i) {
    const double a = 0.3 * i - 1.0, b = -200.0 + 35.0 * (i - 5);
    raw.push_back(float(a));
    raw.push_back(float(b));
    standardized.push_back(float((double(float(a)) - 1.0) / 0.5));
    standardized.push_back(float((double(float(b)) + 200.0) / 40.0));
  }
  Pipeline<float> identity(deck, MPI_COMM_WORLD);
  const auto expected = identity.predict(standardized.data(), 11);
  Pipeline<float> p(deck, MPI_COMM_WORLD);
  p.set_normalization(stats);
  EXPECT_EQ(p.predict(raw.data(), 11), expected);
  const std::string path = ::testing::TempDir() + "gpipe_per_feature_" + std::to_string(world_size()) + ".h5";
  p.save_checkpoint(path);
  Pipeline<float> q(deck, MPI_COMM_WORLD);
  q.load_checkpoint(path);
  EXPECT_EQ(q.normalization().input_feature_mean, (std::vector<double>{1.0, -200.0}));
  EXPECT_EQ(q.normalization().input_feature_std, (std::vector<double>{0.5, 40.0}));
  EXPECT_EQ(q.predict(raw.data(), 11), expected);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST(Regression, StepWithTheWrongTargetKindIsAnError) {
  const Deck deck = parse_deck(deck_text("double", 1, 8, 2), "d");
  Pipeline<double> p(deck, MPI_COMM_WORLD);
  const std::vector<float> x(8, 0.5f);
  const std::vector<std::int32_t> labels(8, 0);
  EXPECT_THROW(p.step(x.data(), labels.data(), 8), InputError);
}

// Trains K = 2 for a few steps with a non-trivial normalization, predicts
// 37 samples (more than a batch: chunked), checkpoints; pipelines of 1 and
// 3 cells loading that checkpoint predict the same bits.
TEST(Regression, InferenceFromK2CheckpointIsBitwiseOn1And3Ranks) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string path = ::testing::TempDir() + "gpipe_regression_k2_" +
                           std::to_string(world_size()) + ".h5";
  const std::string text = deck_text("float", 1, 16, 4);
  const Deck deck = parse_deck(text, "d");
  const Dataset train = sin_cos(64, 0.25);
  std::vector<float> raw(37);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = float(-4.0 + 0.2 * double(i));
  NormalizationStats stats;
  stats.input_mean = 0.25;
  stats.input_std = 1.75;
  stats.target_mean = {0.5, -0.25};
  stats.target_std = {2.0, 0.5};

  std::vector<float> reference;
  auto split = [](bool member) {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank(), &c);
    return c;
  };
  if (MPI_Comm two = split(world_rank() < 2); two != MPI_COMM_NULL) {
    Pipeline<float> p(deck, two);
    p.set_normalization(stats);
    p.set_total_steps(4);
    const auto order = epoch_order(train.samples, 3, 0, true);
    for (int s = 0; s < 4; ++s) p.step(train, order, s * 16, 16);
    reference = p.predict(raw.data(), std::int64_t(raw.size()));
    p.save_checkpoint(path);
    MPI_Comm_free(&two);
  }
  reference.resize(raw.size() * 2);  // rank 0's predictions, on every rank
  MPI_Bcast(reference.data(), int(reference.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  for (int ranks : {1, 3}) {
    if (ranks > world_size()) continue;
    if (MPI_Comm sub = split(world_rank() < ranks); sub != MPI_COMM_NULL) {
      Pipeline<float> q(deck, sub);
      q.load_checkpoint(path);
      EXPECT_EQ(q.normalization().input_std, 1.75);
      EXPECT_EQ(q.normalization().target_std, (std::vector<double>{2.0, 0.5}));
      const auto out = q.predict(raw.data(), std::int64_t(raw.size()));
      ASSERT_EQ(out.size(), reference.size());
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(out[i], reference[i]) << "element " << i << " on " << ranks << " ranks";
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace
}  // namespace gpipe

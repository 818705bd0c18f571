// Issue 25, class 8: a logged metric does not depend on the layout (D, K, M)
// and is reproducible from the checkpoint the run writes; class 5's
// remainder: every entry point checks the checkpoint directory before the
// first step. ctest runs this at 1-4 ranks; each layout runs on the first
// D x K ranks.
//
// The decks (double: a float model's per-sample losses have so few bits
// that their double sums are exact in any order) have a per-sample forward
// that is itself layout-independent (layer_norm
// and element-wise layers: every row computed on its own in fixed order; no
// GEMM, whose OpenBLAS results follow the row count), so any difference in a
// figure would come from how the sums are formed: the test and train loss,
// accuracy and the regression metrics must be bitwise equal across layouts.
// With oneDNN (a row's bits do not depend on the call's row count) a Dense
// model trains bitwise across K and M under fill_drain, so whole epochs'
// reports are compared there too.

#include <gtest/gtest.h>
#include <mpi.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/gpipe.h"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

namespace fs = std::filesystem;
using test::world_rank;
using test::world_size;

// 64 rows: a micro-batch of more than 16 rows is what the old fixed-lane sums
// (16 lanes) added in another order than M = 4's micro-batches of 16.
constexpr std::int64_t kBatch = 64;
const std::string kLayers =
    "[{type: layer_norm}, {type: tanh}, {type: layer_norm}, {type: gelu}]";  // 3 -> 3, or 2 -> 2

std::string deck_text(bool regression, int K, int M, const std::string& extra = "") {
  const std::string in = regression ? "2" : "3";
  return "seed: 11\nprecision: double\nmodel:\n  input: " + in + "\n  layers: " + kLayers +
         (regression ? "\n  loss: mse\ndata: {format: hdf5, train_file: a.h5, test_file: b.h5}"
                     : "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}") +
         "\ntraining: {epochs: 1, batch_size: " + std::to_string(kBatch) + ", micro_batches: " + std::to_string(M) +
         ", progress_every: 0}\noptimizer: {type: adam, lr: 0.01}\nparallel: {cells: " + std::to_string(K) +
         "}\n" + extra;
}

// Regression data: 2 features, 2 targets (smooth functions of them).
Dataset regression_data(std::int64_t samples, std::uint64_t seed) {
  Dataset d = test::synthetic(samples, 2, 2, seed);
  d.labels.clear();
  d.outputs = 2;
  for (std::int64_t i = 0; i < samples; ++i) {
    const double a = d.inputs[size_t(2 * i)], b = d.inputs[size_t(2 * i + 1)];
    d.targets.push_back(float(std::sin(3 * a) + b));
    d.targets.push_back(float(a * b - 0.5));
  }
  return d;
}

const Dataset& train_set(bool regression) {  // one step per epoch
  static const Dataset c = test::synthetic(kBatch, 3, 3, 21), r = regression_data(kBatch, 21);
  return regression ? r : c;
}
const Dataset& test_set(bool regression) {  // 3 evaluation chunks of 64, 64 and 22 samples
  static const Dataset c = test::synthetic(150, 3, 3, 22), r = regression_data(150, 22);
  return regression ? r : c;
}

// Every figure of an evaluation, in order.
void add(std::vector<double>& out, const Evaluation& e) {
  out.push_back(e.loss);
  out.push_back(e.accuracy);
  const auto& m = e.regression;
  for (double v : {m.rmse_all, m.mae_all, m.r2_all}) out.push_back(v);
  for (const auto* v : {&m.rmse, &m.mae, &m.r2}) out.insert(out.end(), v->begin(), v->end());
}
void add(std::vector<double>& out, const EpochReport& r) {
  out.push_back(r.train_loss);
  out.push_back(double(r.train_samples));
  const auto& m = r.train_metrics;
  for (double v : {m.rmse_all, m.mae_all, m.r2_all}) out.push_back(v);
  for (const auto* v : {&m.rmse, &m.mae, &m.r2}) out.insert(out.end(), v->begin(), v->end());
  add(out, r.test);
}

std::vector<std::uint64_t> bits(const std::vector<double>& v) {
  std::vector<std::uint64_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(double));
  return out;
}

// The first `ranks` ranks of the world (MPI_COMM_NULL on the others).
MPI_Comm first_ranks(int ranks) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

// The figures of the untrained model on the test set (evaluation path) and
// of a one-step epoch's report (training path: its train loss and train
// metrics are the initial weights'; its test figures are not compared, as
// the weights after a step follow the layout's gradient sums).
std::vector<double> figures(bool regression, int K, int M, MPI_Comm comm) {
  Pipeline<double> p(parse_deck(deck_text(regression, K, M), "metrics.yaml"), comm);
  std::vector<double> out;
  add(out, p.evaluate(test_set(regression)));
  add(out, p.evaluate(train_set(regression)));
  const auto reports = fit(p, train_set(regression), test_set(regression), nullptr);
  EXPECT_EQ(reports.size(), 1u);
  out.push_back(reports.at(0).train_loss);
  out.push_back(double(reports.at(0).train_samples));
  const auto& m = reports.at(0).train_metrics;
  for (double v : {m.rmse_all, m.mae_all, m.r2_all}) out.push_back(v);
  return out;
}

void check_layouts(bool regression) {
  std::vector<double> reference;
  if (world_rank() == 0) reference = figures(regression, 1, 1, MPI_COMM_SELF);
  for (int D : {1, 2})
    for (int K : {1, 2})
      for (int M : {1, 2, 4}) {
        if (D * K > world_size() || (D == 1 && K == 1 && M == 1)) continue;
        MPI_Comm comm = first_ranks(D * K);
        if (comm == MPI_COMM_NULL) continue;
        const auto got = figures(regression, K, M, comm);
        MPI_Comm_free(&comm);
        if (world_rank() != 0) continue;
        ASSERT_EQ(got.size(), reference.size());
        EXPECT_EQ(bits(got), bits(reference)) << (regression ? "mse" : "classification") << ": D = " << D
                                              << ", K = " << K << ", M = " << M << "; loss " << got[0] << " vs "
                                              << reference[0];
      }
}

TEST(Metrics, ClassificationFiguresBitwiseAcrossDKM) { check_layouts(false); }
TEST(Metrics, RegressionFiguresBitwiseAcrossDKM) { check_layouts(true); }

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "gpipe_metrics_" + name + "_" + std::to_string(world_size());
  if (world_rank() == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

// The logged test figures of the last epoch, reproduced from the checkpoint
// the run wrote after it: loaded on one rank with another M, the evaluation
// gives the same bits (classification and regression; the run on every
// rank of the world, K = ranks).
void check_reproduced(bool regression) {
  const std::string dir = fresh_dir(regression ? "reproduce_mse" : "reproduce");
  const std::string extra = "checkpoint: {directory: " + dir + ", every_epochs: 1}\n";
  std::string text = deck_text(regression, world_size(), 2, extra);
  text.replace(text.find("epochs: 1"), 9, "epochs: 2");
  const Dataset train = regression ? regression_data(160, 31) : test::synthetic(160, 3, 3, 31);
  std::vector<EpochReport> reports;
  {
    Pipeline<double> p(parse_deck(text, "metrics.yaml"), MPI_COMM_WORLD);
    reports = fit(p, train, test_set(regression), nullptr);
  }
  ASSERT_EQ(reports.size(), 2u);
  std::vector<double> logged;
  add(logged, reports.back().test);
  const std::string newest = newest_checkpoint(dir);
  ASSERT_FALSE(newest.empty());
  Pipeline<double> again(parse_deck(deck_text(regression, 1, 3), "metrics.yaml"), MPI_COMM_SELF);
  again.load_checkpoint(newest);
  std::vector<double> reproduced;
  add(reproduced, again.evaluate(test_set(regression)));
  EXPECT_EQ(bits(reproduced), bits(logged)) << "test loss " << reproduced[0] << " vs logged " << logged[0];
  EXPECT_GT(logged[0], 0.0);
}

TEST(Metrics, TestFiguresReproducedFromTheCheckpoint) { check_reproduced(false); }
TEST(Metrics, RegressionTestFiguresReproducedFromTheCheckpoint) { check_reproduced(true); }

// With oneDNN: a Dense model under fill_drain trains bitwise across K and M,
// so every figure of two whole epochs (several steps each) is bitwise equal.
TEST(Metrics, OneDnnEpochReportsBitwiseAcrossKAndM) {
  if (kernels::available().size() < 2) GTEST_SKIP() << "no oneDNN in this build";
  const Dataset train = test::synthetic(224, 3, 3, 41);  // 3 steps of 64 and a last batch of 32
  auto reports = [&](int K, int M, MPI_Comm comm) {
    // Below AVX-512 oneDNN's f32 GEMM is not row-independent: `auto`, which
    // then keeps the portable GEMM (onednn_f32_gemm_rule), must be bitwise.
    const std::string kernels = kernels::onednn_f32_gemm_rule(kernels::this_cpu()) ? "onednn" : "auto";
    std::string text = deck_text(false, K, M, "kernels: " + kernels + "\npipeline: {schedule: fill_drain}\n");
    text.replace(text.find("precision: double"), 17, "precision: float");  // oneDNN's path is float
    text.replace(text.find(kLayers), kLayers.size(),
                 "[{type: dense, units: 9}, {type: tanh}, {type: dense, units: 7}, {type: dense, units: 3}]");
    text.replace(text.find("epochs: 1"), 9, "epochs: 2");
    Pipeline<float> p(parse_deck(text, "metrics.yaml"), comm);
    std::vector<double> out;
    for (const auto& r : fit(p, train, test_set(false), nullptr)) add(out, r);
    kernels::select(kernels::Choice::automatic);
    return out;
  };
  std::vector<double> reference;
  if (world_rank() == 0) reference = reports(1, 1, MPI_COMM_SELF);
  for (int K : {1, 2})
    for (int M : {1, 2, 4}) {
      if (K > world_size() || (K == 1 && M == 1)) continue;
      MPI_Comm comm = first_ranks(K);
      if (comm == MPI_COMM_NULL) continue;
      const auto got = reports(K, M, comm);
      MPI_Comm_free(&comm);
      if (world_rank() == 0) EXPECT_EQ(bits(got), bits(reference)) << "K = " << K << ", M = " << M;
    }
}

// Class 8, another instance: the epoch's count of skipped steps
// (training.nonfinite: skip_step) was this job's only, so a run stopped and
// restarted mid-epoch reported fewer than the uninterrupted run; the
// checkpoint now carries it (epoch_skipped_steps), with the epoch's loss.
TEST(Metrics, SkippedStepsCountedAcrossARestart) {
  const std::string dir = fresh_dir("skipped");
  std::string text = deck_text(false, world_size(), 2,
                               "checkpoint: {directory: " + dir + ", every_steps: 1, keep: 100}\n");
  text.replace(text.find("progress_every: 0"), 17, "progress_every: 0, nonfinite: skip_step");
  const Deck deck = parse_deck(text, "metrics.yaml");
  Dataset train = test::synthetic(256, 3, 3, 51);  // 4 steps; the first sample of the first step is a spike
  const auto first = epoch_order(train.samples, deck.seed, 0, true)[0];
  for (int j = 0; j < 3; ++j) train.inputs[size_t(first * 3 + j)] = std::nanf("");
  EpochReport whole;
  {
    Pipeline<double> p(deck, MPI_COMM_WORLD);
    const auto r = fit(p, train, test_set(false), nullptr);
    ASSERT_EQ(r.size(), 1u);
    whole = r[0];
  }
  EXPECT_EQ(whole.skipped_steps, 1);
  EXPECT_EQ(whole.train_samples, 192);
  if (world_rank() == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  {  // stopped after step 2, restarted from its checkpoint
    Pipeline<double> p(deck, MPI_COMM_WORLD);
    Driver<double> driver(p, nullptr);
    driver.set_stop([&p] { return p.steps_done() == 2; });
    EXPECT_TRUE(driver.fit(train, test_set(false)).empty());
    EXPECT_TRUE(driver.stopped());
  }
  Pipeline<double> p(deck, MPI_COMM_WORLD);
  p.load_checkpoint(newest_checkpoint(dir));
  EXPECT_EQ(p.steps_done(), 2);
  const auto r = fit(p, train, test_set(false), nullptr);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].skipped_steps, 1);
  EXPECT_EQ(r[0].train_samples, 192);
  std::vector<double> a, b;
  add(a, whole);
  add(b, r[0]);
  EXPECT_EQ(bits(b), bits(a)) << "train loss " << r[0].train_loss << " vs " << whole.train_loss;
}

// ---- Class 5: the checkpoint directory is checked before the first step ----

// The OS's reason for not creating directory `dir` (what mkdir says).
std::string mkdir_reason(const std::string& dir) {
  errno = 0;
  if (::mkdir(dir.c_str(), 0700) == 0) {
    ::rmdir(dir.c_str());
    return "created";
  }
  return std::strerror(errno);
}

// Two directories no process can write, root included: one under a regular
// file (ENOTDIR) and one under /sys (sysfs refuses new entries: EPERM, or
// EROFS where it is mounted read-only).
std::vector<std::string> unwritable_dirs() {
  const std::string file = fresh_dir("dirs") + "_file";
  if (world_rank() == 0) std::ofstream(file) << "a regular file\n";
  MPI_Barrier(MPI_COMM_WORLD);
  return {file + "/checkpoints", "/sys/gpipe_rel_checkpoints"};
}

TEST(CheckpointDirectory, DriverFitRefusesItBeforeTheFirstStep) {
  for (const std::string& dir : unwritable_dirs()) {
    const std::string reason = mkdir_reason(dir);
    ASSERT_NE(reason, "created") << dir;
    Pipeline<double> p(parse_deck(deck_text(false, world_size(), 2, "checkpoint: {directory: " + dir + "}\n"),
                                 "metrics.yaml"),
                      MPI_COMM_WORLD);
    std::string error;
    try {
      fit(p, train_set(false), test_set(false), nullptr);
    } catch (const InputError& e) {
      error = e.what();
      EXPECT_NE(dynamic_cast<const Agreed*>(&e), nullptr);
    }
    EXPECT_EQ(error, "checkpoint.directory " + dir + ": cannot create the directory: " + reason + " (rank 0)");
    EXPECT_EQ(p.steps_done(), 0);  // before the first step
  }
  // A stop request's checkpoint goes to the working directory: checked too.
  const fs::path cwd = fs::current_path();
  fs::current_path("/sys");
  Pipeline<double> p(parse_deck(deck_text(false, world_size(), 2), "metrics.yaml"), MPI_COMM_WORLD);
  Driver<double> driver(p, nullptr);
  driver.set_stop([] { return false; });
  std::string error;
  try {
    driver.fit(train_set(false), test_set(false));
  } catch (const InputError& e) {
    error = e.what();
  }
  fs::current_path(cwd);
  errno = 0;
  const int fd = ::open("/sys/.gpipe_probe", O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_LT(fd, 0);
  EXPECT_EQ(error, std::string("the working directory (where a stop signal's checkpoint goes) ./ckpt_probe.h5: "
                               "cannot create files in .: ") +
                       std::strerror(errno) + " (rank 0)");
  EXPECT_EQ(p.steps_done(), 0);
}

TEST(CheckpointDirectory, CApiReturnsAnErrorCodeAndStaysUsable) {
  for (const std::string& dir : unwritable_dirs()) {
    const std::string reason = mkdir_reason(dir);
    const std::string text = deck_text(false, world_size(), 2, "checkpoint: {directory: " + dir + "}\n");
    gpipe_trainer* t = nullptr;
    EXPECT_EQ(gpipe_create_from_string(text.c_str(), MPI_COMM_WORLD, &t), GPIPE_ERROR_INPUT);
    EXPECT_EQ(t, nullptr);
    EXPECT_EQ(std::string(gpipe_last_error()),
              "checkpoint.directory " + dir + ": cannot create the directory: " + reason + " (rank 0)");
  }
  // The library is still usable: a trainer with a writable directory trains.
  const std::string dir = fresh_dir("capi_ok");
  const std::string text = deck_text(false, world_size(), 2, "checkpoint: {directory: " + dir + "}\n");
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(text.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  const Dataset& d = train_set(false);
  double loss = 0;
  EXPECT_EQ(gpipe_train_step(t, d.inputs.data(), d.labels.data(), kBatch, &loss), GPIPE_OK) << gpipe_last_error();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

}  // namespace
}  // namespace gpipe

// Non-finite values during training (training.nonfinite), at 1-4 ranks: the
// ranks agree on one decision, the error names the step, the cell and the
// first layer with a non-finite gradient, and no checkpoint is written from
// non-finite weights.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

namespace fs = std::filesystem;
using test::world_rank;
using test::world_size;

// A quickstart-like MLP on 16 features, float, 4 micro-batches of 4.
Deck mlp(const std::string& nonfinite, const std::string& dir) {
  Deck d = parse_deck(test::deck_text("[{type: dense, units: 512}, {type: relu}, {type: dense, units: 256}, "
                                      "{type: relu}, {type: dense, units: 10}]",
                                      16, 16, 4, "float", "{balance: flops}",
                                      "{type: adamw, lr: 1.0e-3, weight_decay: 1.0e-4}"),
                      "mlp.yaml", {"training.nonfinite=" + nonfinite});
  d.checkpoint.directory = dir;
  d.checkpoint.every_steps = 1;
  d.training.progress_every = 0;
  d.training.epochs = 2;
  return d;
}

// 64 samples; the first sample of epoch 0's order is a spike: all its
// features are 3e38 (finite floats whose first-layer sums overflow).
Dataset spiked(const Deck& d) {
  Dataset data = test::synthetic(64, 16, 10, 3);
  const auto first = epoch_order(data.samples, d.seed, 0, true)[0];
  for (int j = 0; j < 16; ++j) data.inputs[size_t(first * 16 + j)] = 3e38f;
  return data;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "gpipe_nonfinite_" + name + "_" + std::to_string(world_size());
  if (world_rank() == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

int checkpoints_in(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".h5" ? 1 : 0;
  return n;
}

// The case: abort on every rank with the same message, no checkpoint.
TEST(NonFinite, AbortOnEveryRankAndNoCheckpoint) {
  const std::string dir = fresh_dir("abort");
  const Deck d = mlp("abort", dir);
  const Dataset data = spiked(d);
  Pipeline<float> t(d, MPI_COMM_WORLD);
  const auto before = t.gather_parameters();
  std::string error;
  try {
    fit(t, data, data, nullptr);
  } catch (const PipelineError& e) {
    error = e.what();
    EXPECT_NE(dynamic_cast<const Agreed*>(&e), nullptr);
  }
  EXPECT_EQ(error,
            "step 1: non-finite values (training.nonfinite: abort): the loss is not finite; the first "
            "layer with a non-finite gradient is layer 0 (dense) in cell 0; the parameters are those "
            "before this step");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(checkpoints_in(dir), 0);
  const auto after = t.gather_parameters();  // unchanged, and the trainer still usable
  if (world_rank() == 0) EXPECT_EQ(after, before);
}

// skip_step: the spiked batch leaves the parameters unchanged; training goes on.
TEST(NonFinite, SkipStepLeavesTheParametersUnchanged) {
  const std::string dir = fresh_dir("skip");
  const Deck d = mlp("skip_step", dir);
  const Dataset data = spiked(d);
  Pipeline<float> t(d, MPI_COMM_WORLD);
  const auto order = epoch_order(data.samples, d.seed, 0, true);
  const auto before = t.gather_parameters();
  t.step(data, order, 0, 16);
  EXPECT_FALSE(t.last_step_finite());
  EXPECT_EQ(t.skipped_steps(), 1);
  const auto after = t.gather_parameters();
  if (world_rank() == 0) EXPECT_EQ(after, before);
  t.step(data, order, 16, 16);
  EXPECT_TRUE(t.last_step_finite());
  EXPECT_EQ(t.skipped_steps(), 1);
  EXPECT_EQ(t.steps_done(), 2);
}

// ignore: the update is applied; the weights become non-finite and no
// checkpoint is written from them; the epoch's figures say "not finite".
TEST(NonFinite, IgnoreNeverCheckpointsNonFiniteWeights) {
  const std::string dir = fresh_dir("ignore");
  Deck d = mlp("ignore", dir);
  d.training.epochs = 1;
  const Dataset data = spiked(d);
  Pipeline<float> t(d, MPI_COMM_WORLD);
  std::string error;
  try {
    fit(t, data, data, nullptr);
  } catch (const PipelineError& e) {
    error = e.what();
  }
  EXPECT_EQ(error.rfind(dir + "/ckpt_000000001_" + t.run_id() + ".h5: not written: the parameters of ", 0),
            0u)
      << error;
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(checkpoints_in(dir), 0);
}

}  // namespace
}  // namespace gpipe

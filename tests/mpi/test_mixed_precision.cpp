// Mixed precision across MPI ranks (issue 22; ctest runs this at 1-4
// ranks): bf16 results bitwise independent of the partition (every
// activation and input gradient is a bf16 value, so the 16-bit boundary
// messages are lossless), restart in bf16 bitwise and in another precision,
// fp16 loss scaling whose overflow decision every rank shares, and the
// boundary bytes of a 16-bit wire exactly half those of float.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/runner.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/stage.hpp"
#include "gpipe/pipeline/wire_format.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

namespace fs = std::filesystem;
using test::world_rank;
using test::world_size;

constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 12;

const Dataset& data() {
  static const Dataset d = test::synthetic(kBatch * 3, kInput, 3, 5);
  return d;
}

Deck deck(const std::string& precision, const std::vector<std::string>& sets = {}) {
  return parse_deck(test::deck_text(test::kNineLayers, kInput, kBatch, 4, precision, "{}", "{type: adam, lr: 0.01}"),
                    "mixed.yaml", sets);
}

void run(Pipeline<float>& t, std::int64_t from, std::int64_t to) {
  for (std::int64_t s = from; s < to; ++s) {
    const auto order = epoch_order(data().samples, 7, s / 3, true);
    t.step(data(), order, (s % 3) * kBatch, kBatch);
  }
}

std::vector<float> trained(const Deck& d, MPI_Comm comm, int steps) {
  Pipeline<float> t(d, comm);
  run(t, 0, steps);
  return t.gather_parameters();
}

std::string shared_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "gpipe_mixed_" + name + "_" + std::to_string(world_size());
  if (world_rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

TEST(MixedPrecision, Bf16BitwiseAcrossCellsAndMicroBatches) {
  std::vector<float> one, one_m1, as_float;
  if (world_rank() == 0) {
    one = trained(deck("bf16"), MPI_COMM_SELF, 4);
    one_m1 = trained(deck("bf16", {"training.micro_batches=1"}), MPI_COMM_SELF, 4);
    as_float = trained(deck("float"), MPI_COMM_SELF, 4);
  }
  const auto k = trained(deck("bf16"), MPI_COMM_WORLD, 4);
  const auto remat = trained(deck("bf16", {"pipeline.remat=always"}), MPI_COMM_WORLD, 4);
  if (world_rank() == 0) {
    EXPECT_EQ(k, one);      // K cells = 1 cell, bitwise
    EXPECT_EQ(remat, one);  // re-materialization invisible
    EXPECT_EQ(one_m1, one); // M = 1 and M = 4
    // bf16 is in effect (differs from float) but close to it: 4 Adam steps of
    // lr 0.01 move a weight by at most 0.04; the bf16 run stays well inside.
    ASSERT_EQ(as_float.size(), one.size());
    double largest = 0;
    for (size_t i = 0; i < one.size(); ++i) largest = std::max(largest, std::abs(double(one[i]) - double(as_float[i])));
    EXPECT_GT(largest, 0.0);
    EXPECT_LT(largest, 0.04);
  }
}

TEST(MixedPrecision, Bf16BoundaryBytesHalfOfFloat) {
  if (world_size() < 2) GTEST_SKIP() << "no boundary at 1 rank";
  std::int64_t bytes[2];
  for (int p = 0; p < 2; ++p) {
    Pipeline<float> t(deck(p == 0 ? "float" : "bf16"), MPI_COMM_WORLD);
    const std::int64_t before = boundary_bytes_sent();
    run(t, 0, 1);
    bytes[p] = boundary_bytes_sent() - before;
  }
  EXPECT_GT(bytes[0], 0);
  EXPECT_EQ(bytes[1] * 2, bytes[0]);
  // The plan (no MPI) predicts every cell's bytes exactly, in both precisions.
  for (int p = 0; p < 2; ++p) {
    Pipeline<float> t(deck(p == 0 ? "float" : "bf16"), MPI_COMM_WORLD);
    run(t, 0, 1);
    EXPECT_EQ(t.gather_boundary_bytes(), plan_run(deck(p == 0 ? "float" : "bf16"), world_size()).boundary_bytes);
  }
}

// The same on a small CNN whose max/average pooling, flatten and dropout
// do not read their input in backward (Layer::reads_input_in_backward):
// under 16-bit storage the stage neither packs their inputs after the
// forward nor unpacks them for the backward, and the weights and the
// evaluation loss stay bitwise float storage's.
TEST(MixedPrecision, SixteenBitStorageSkipsUnreadInputsBitwise) {
  constexpr std::int64_t kCnnFeatures = 2 * 6 * 7, kCnnBatch = 10;
  static const Dataset cnn_data = test::synthetic(kCnnBatch * 2, kCnnFeatures, 3, 13);
  const auto cnn_deck = [&](const std::string& precision, const std::vector<std::string>& sets) {
    const std::string text = "seed: 5\nprecision: " + precision + "\nmodel:\n  input: [2, 6, 7]\n  layers: " +
                             test::kSmallCnn +
                             "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}"
                             "\ntraining: {epochs: 1, batch_size: 10, micro_batches: 2}"
                             "\noptimizer: {type: adam, lr: 0.01}\n";
    return parse_deck(text, "cnn16.yaml", sets);
  };
  for (const char* precision : {"bf16", "fp16"})
    for (const std::string schedule : {"fill_drain", "1f1b", "zero_bubble"}) {
      SCOPED_TRACE(std::string(precision) + " " + schedule);
      const std::vector<std::string> sets{"pipeline.schedule=" + schedule};
      auto as_float = sets;
      as_float.push_back("pipeline.activation_storage=float");
      Pipeline<float> packed(cnn_deck(precision, sets), MPI_COMM_WORLD),
          reference(cnn_deck(precision, as_float), MPI_COMM_WORLD);
      for (Pipeline<float>* p : {&packed, &reference}) test::run_steps(*p, cnn_data, 5, 2, kCnnBatch, 0, 3);
      const auto a = packed.gather_parameters(), b = reference.gather_parameters();
      const double la = packed.evaluate(cnn_data).loss, lb = reference.evaluate(cnn_data).loss;
      if (world_rank() == 0) {
        EXPECT_EQ(a, b);
        EXPECT_EQ(la, lb);
        EXPECT_TRUE(std::isfinite(la));
      }
    }
}

// 16-bit activation storage (pipeline.activation_storage: auto) against
// float buffers of the same 16-bit values (float, the layout before it):
// bitwise the same weights and evaluation loss under every schedule that
// keeps different buffers (fill_drain's whole-batch W, 1f1b, zero_bubble's
// kept output gradients, interleaved stages, re-materialization), in bf16
// and fp16; each rank's activation bytes are float storage's less exactly
// half of its kept values' (stage_slot_bytes), and the Tracer's Send bytes
// are the wire's (2 bytes a value): what boundary_bytes_sent counts.
TEST(MixedPrecision, SixteenBitStorageBitwiseAsFloatStorage) {
  const int K = world_size();
  std::vector<std::vector<std::string>> layouts = {{"pipeline.schedule=fill_drain"},
                                                   {"pipeline.schedule=1f1b"},
                                                   {"pipeline.schedule=zero_bubble"},
                                                   {"pipeline.remat=always"},
                                                   {"pipeline.schedule=1f1b", "pipeline.remat=except_last"}};
  if (4 % K == 0 && 2 * K <= 9)
    layouts.push_back({"pipeline.schedule=interleaved_1f1b", "pipeline.chunks=2", "pipeline.remat=always"});
  const std::string trace = ::testing::TempDir() + "gpipe_storage_trace_" + std::to_string(K) + ".json";
  for (const char* precision : {"bf16", "fp16"})
    for (auto sets : layouts) {
      SCOPED_TRACE(std::string(precision) + " " + sets.back());
      sets.push_back("trace.file=" + trace);
      sets.push_back("trace.every=1");
      auto as_float = sets;
      as_float.push_back("pipeline.activation_storage=float");
      Pipeline<float> packed(deck(precision, sets), MPI_COMM_WORLD), reference(deck(precision, as_float), MPI_COMM_WORLD);
      const std::int64_t before = boundary_bytes_sent();
      run(packed, 0, 3);
      const std::int64_t sent = boundary_bytes_sent() - before;
      run(reference, 0, 3);
      const auto p = packed.gather_parameters(), r = reference.gather_parameters();
      const double lp = packed.evaluate(data()).loss, lr = reference.evaluate(data()).loss;
      if (world_rank() == 0) {
        EXPECT_EQ(p, r);
        EXPECT_EQ(lp, lr);
      }
      std::int64_t traced = 0;
      for (const auto& e : packed.tracer().events())
        if (e.kind == std::int8_t(EventKind::Send)) traced += e.bytes;
      EXPECT_EQ(traced, sent) << "rank " << world_rank();
      // The bytes: float storage's less half of the kept values, stage by stage.
      const Deck d = deck(precision, sets);
      const Schedule schedule = deck_schedule(d, K);
      CellOptions o;
      o.max_batch = kBatch;
      o.micro_batches = d.training.micro_batches;
      o.remat = d.pipeline.remat;
      o.schedule = d.pipeline.schedule;
      o.chunks = d.pipeline.chunks;
      o.activation_storage16 = false;  // float storage: values at 4 bytes
      o.wire = precision_policy(precision).wire;
      const auto bp = packed.gather_activation_bytes(), br = reference.gather_activation_bytes();
      for (int k = 0; k < K; ++k) {
        std::int64_t halved = 0;
        for (const int st : stages_of_rank(schedule, k)) {
          const StageSlotBytes b = stage_slot_bytes(model_shapes(d.model), packed.partition(), st, schedule, o, 4);
          const CellBufferPlan plan = plan_buffers(schedule, st);
          EXPECT_EQ(b.values.micro_batch % 2, 0);
          halved += (plan.micro_batch.slots * b.values.micro_batch + plan.activations.slots * b.values.activations +
                     plan.weight_grad.slots * b.values.weight_grad) / 2;
        }
        EXPECT_GT(halved, 0);
        EXPECT_EQ(bp[size_t(k)], br[size_t(k)] - halved) << "rank " << k;
      }
    }
}

TEST(MixedPrecision, Bf16RestartBitwiseAndInAnotherPrecision) {
  const std::string dir = shared_dir("restart");
  const auto reference = trained(deck("bf16"), MPI_COMM_WORLD, 5);
  std::vector<float> saved;
  {
    Pipeline<float> first(deck("bf16"), MPI_COMM_WORLD);
    run(first, 0, 3);
    first.save_checkpoint(checkpoint_path(dir, 3));
    saved = first.gather_parameters();
  }
  Pipeline<float> second(deck("bf16"), MPI_COMM_WORLD);
  const CheckpointInfo info = second.load_checkpoint(checkpoint_path(dir, 3));
  EXPECT_EQ(info.precision, "float");  // fp32 master weights and optimizer state
  EXPECT_EQ(info.run_precision, "bf16");
  run(second, 3, 5);
  const auto restarted = second.gather_parameters();
  if (world_rank() == 0) EXPECT_EQ(restarted, reference);
  // The same checkpoint restarts in float and in fp16: the master weights load as they are.
  for (const char* other : {"float", "fp16"}) {
    Pipeline<float> t(deck(other), MPI_COMM_WORLD);
    t.load_checkpoint(checkpoint_path(dir, 3));
    const auto loaded = t.gather_parameters();
    if (world_rank() == 0) EXPECT_EQ(loaded, saved) << other;
    run(t, 3, 4);
    EXPECT_TRUE(t.last_step_applied()) << other;
  }
}

// The test: an overflow injected on one cell skips the step on
// every rank; the scale backs off, then grows after the interval.
TEST(MixedPrecision, Fp16OverflowOnOneCellSkipsTheStepEverywhere) {
  const Deck d = deck("fp16", {"training.loss_scale=1024", "training.loss_scale_growth_interval=2",
                               "training.loss_scale_backoff=0.5", "training.loss_scale_growth=4"});
  Pipeline<float> t(d, MPI_COMM_WORLD);
  EXPECT_EQ(t.loss_scaler().scale(), 1024.0);
  run(t, 0, 1);  // good step 1
  EXPECT_TRUE(t.last_step_applied());
  EXPECT_EQ(t.loss_scaler().good_steps(), 1);
  const auto before = t.gather_parameters();
  const int injector = world_size() - 1 - (world_size() > 2 ? 1 : 0);  // one cell only (rank 2 of 4)
  if (world_rank() == injector) t.inject_gradient_overflow();
  run(t, 1, 2);
  EXPECT_FALSE(t.last_step_applied());  // on every rank
  EXPECT_EQ(t.skipped_steps(), 1);
  EXPECT_EQ(t.loss_scaler().scale(), 512.0);
  EXPECT_EQ(t.loss_scaler().overflows(), 1);
  const auto after = t.gather_parameters();
  if (world_rank() == 0) EXPECT_EQ(after, before);  // nothing moved anywhere
  run(t, 2, 3);
  EXPECT_EQ(t.loss_scaler().scale(), 512.0);
  run(t, 3, 4);  // second good step after the overflow: grows by 4
  EXPECT_EQ(t.loss_scaler().scale(), 2048.0);
  EXPECT_EQ(t.skipped_steps(), 1);
  // Every rank holds the same scaler.
  double s = t.loss_scaler().scale(), lo = 0, hi = 0;
  MPI_Allreduce(&s, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&s, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi);
}

// A model whose fp16 gradients overflow at every step of an epoch (the
// scaled loss gradient 2^64 / N is infinite in fp16): before, the epoch
// reported a train loss of 0.0000 (0 / 0 samples taken as 0) and the summary
// "finite": true; now no train loss (NaN: null in the summary), the epoch
// line says so, and the 3 skipped steps are counted.
TEST(MixedPrecision, Fp16EpochWithEveryStepSkippedReportsNoTrainLoss) {
  Pipeline<float> t(deck("fp16", {"training.loss_scale=18446744073709551616"}), MPI_COMM_WORLD);
  std::ostringstream log;
  const auto reports = fit(t, data(), data(), &log);
  ASSERT_EQ(reports.size(), 1u);
  const EpochReport& r = reports[0];
  EXPECT_EQ(r.skipped_steps, 3);
  EXPECT_EQ(t.loss_scaler().overflows(), 3);
  EXPECT_EQ(t.loss_scaler().scale(), 0x1p61);
  EXPECT_EQ(r.train_samples, 0);
  EXPECT_TRUE(std::isnan(r.train_loss));
  EXPECT_FALSE(r.train_loss_finite);
  EXPECT_TRUE(r.test.finite());  // the untrained weights' test figures are real ones
  if (world_rank() == 0)
    EXPECT_NE(log.str().find("epoch 1/1: train loss none (every step skipped), test loss "), std::string::npos)
        << log.str();
}

// Loss scaling is exact: with power-of-two scales the unscaled gradients of
// an fp16 run do not depend on the scale as long as nothing under- or
// overflows, so two initial scales give bitwise the same weights.
TEST(MixedPrecision, Fp16PowerOfTwoScalesGiveTheSameWeights) {
  const auto a = trained(deck("fp16", {"training.loss_scale=4096"}), MPI_COMM_WORLD, 3);
  const auto b = trained(deck("fp16", {"training.loss_scale=65536"}), MPI_COMM_WORLD, 3);
  if (world_rank() == 0) EXPECT_EQ(a, b);
}

// The scale reaches the gradients and is divided out again: with SGD (no
// normalization by the gradient's size, unlike Adam) an fp16 run with
// S = 2^16 moves every weight as the float run does, up to fp16 rounding;
// a scale applied and not divided out (or the reverse) would move them
// 2^16 times too far (too little).
TEST(MixedPrecision, Fp16ScaledSgdStepMatchesFloat) {
  const std::vector<std::string> sgd = {"optimizer.type=sgd", "optimizer.lr=0.5", "optimizer.momentum=0"};
  auto with = [&](std::vector<std::string> v) {
    v.insert(v.end(), sgd.begin(), sgd.end());
    return v;
  };
  std::vector<float> initial;
  {
    Pipeline<float> t(deck("float", with({})), MPI_COMM_WORLD);
    initial = t.gather_parameters();
  }
  const auto f = trained(deck("float", with({})), MPI_COMM_WORLD, 2);
  const auto h = trained(deck("fp16", with({"training.loss_scale=65536"})), MPI_COMM_WORLD, 2);
  if (world_rank() == 0) {
    double moved = 0, apart = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      moved = std::max(moved, std::abs(double(f[i]) - initial[i]));
      apart = std::max(apart, std::abs(double(h[i]) - f[i]));
    }
    EXPECT_GT(moved, 1e-3);
    EXPECT_LT(apart, 0.05 * moved);
  }
}

}  // namespace
}  // namespace gpipe

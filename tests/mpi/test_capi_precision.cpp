// The C API (gpipe/gpipe.h) in bf16 and fp16 on every schedule family
// (ctest runs this at 1, 2, 3 and 4 ranks): a step, predictions and the
// fp32 master weights; a bf16 checkpoint restarts a float and an fp16
// trainer with bitwise its master weights; bf16 with zb_v / interleaved_1f1b
// gives 1f1b's weights bitwise (the same gradient sums).

#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/gpipe.h"

namespace gpipe {
namespace {

constexpr int kBatch = 8, kFeatures = 6;

std::string deck(const std::string& precision, const std::string& pipeline) {
  return test::deck_text(test::kNineLayers, test::kNineLayersInput, kBatch, 4, precision, pipeline,
                         "{type: adam, lr: 0.01}");
}

struct Trained {
  std::vector<double> weights;
  std::vector<float> logits;
  double loss = 0;
};

// Two steps and a prediction through the C API; `save` writes a checkpoint.
Trained run(const std::string& text, const std::string& save = "", const std::string& load = "") {
  Trained out;
  gpipe_trainer* t = nullptr;
  EXPECT_EQ(gpipe_create_from_string(text.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  if (t == nullptr) return out;
  if (!load.empty()) EXPECT_EQ(gpipe_load_checkpoint(t, load.c_str()), GPIPE_OK) << gpipe_last_error();
  const Dataset d = test::synthetic(kBatch * 2, kFeatures, 3, 5);
  for (int step = 0; step < 2 && load.empty(); ++step)
    EXPECT_EQ(gpipe_train_step(t, d.inputs.data() + step * kBatch * kFeatures, d.labels.data() + step * kBatch,
                               kBatch, &out.loss),
              GPIPE_OK)
        << gpipe_last_error();
  int64_t count = 0;
  EXPECT_EQ(gpipe_parameter_count(t, &count), GPIPE_OK);
  out.weights.resize(size_t(count));
  EXPECT_EQ(gpipe_get_parameters(t, out.weights.data(), count), GPIPE_OK) << gpipe_last_error();
  out.logits.resize(size_t(3 * 3));
  EXPECT_EQ(gpipe_predict(t, d.inputs.data(), 3, out.logits.data()), GPIPE_OK) << gpipe_last_error();
  if (!save.empty()) EXPECT_EQ(gpipe_save_checkpoint(t, save.c_str()), GPIPE_OK) << gpipe_last_error();
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
  return out;
}

std::string path(const std::string& what) {
  long long pid = (long long)getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return "/tmp/gpipe_test_capi_precision_" + what + "_" + std::to_string(pid) + ".h5";
}

TEST(CApiPrecision, Bf16StepsPredictsAndRestartsInFloatAndFp16) {
  ASSERT_EQ(test::kNineLayersInput, kFeatures);
  const std::string ckpt = path("bf16");
  const Trained bf16 = run(deck("bf16", "{schedule: 1f1b}"), ckpt);
  ASSERT_FALSE(bf16.weights.empty());
  EXPECT_TRUE(std::isfinite(bf16.loss));
  for (float v : bf16.logits) EXPECT_TRUE(std::isfinite(v));
  // The fp32 master weights hold more than bf16's 8 significant bits.
  int wide = 0;
  for (double w : bf16.weights) {
    const float f = float(w);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    wide += double(f) == w && (bits & 0xffffu) != 0;  // an fp32 value, not a bf16 one
  }
  EXPECT_GT(wide, 0);
  // A float and an fp16 trainer restarted from the bf16 checkpoint hold its
  // master weights bitwise; the float one predicts in float.
  const Trained f = run(deck("float", "{}"), "", ckpt);
  EXPECT_EQ(f.weights, bf16.weights);
  const Trained h = run(deck("fp16", "{}"), "", ckpt);
  EXPECT_EQ(h.weights, bf16.weights);
  for (float v : h.logits) EXPECT_TRUE(std::isfinite(v));
  MPI_Barrier(MPI_COMM_WORLD);
  if (test::world_rank() == 0) std::remove(ckpt.c_str());
}

// An fp16 step whose gradients overflow returns GPIPE_OK and a finite loss,
// and before there was no way for a C caller to know that its update was
// skipped: gpipe_skipped_steps counts them (the same on every rank).
TEST(CApiPrecision, Fp16OverflowedStepsAreCounted) {
  const std::string text = deck("fp16", "{}") + "\n";  // 2^64: the scaled loss gradient overflows fp16
  std::string with_scale = text;
  with_scale.replace(with_scale.find("training: {"), 11, "training: {loss_scale: 18446744073709551616, ");
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(with_scale.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  const Dataset d = test::synthetic(kBatch, kFeatures, 3, 5);
  int64_t skipped = -1;
  EXPECT_EQ(gpipe_skipped_steps(t, &skipped), GPIPE_OK);
  EXPECT_EQ(skipped, 0);
  double loss = 0;
  EXPECT_EQ(gpipe_train_step(t, d.inputs.data(), d.labels.data(), kBatch, &loss), GPIPE_OK) << gpipe_last_error();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(gpipe_skipped_steps(t, &skipped), GPIPE_OK);
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(gpipe_skipped_steps(t, nullptr), GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_skipped_steps: trainer and skipped must not be NULL");
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

TEST(CApiPrecision, Bf16SchedulesGiveOneFOneBsWeights) {
  const int K = test::world_size();
  const Trained ref = run(deck("bf16", "{schedule: 1f1b}"));
  for (const std::string pipeline : {"{schedule: zero_bubble}", "{schedule: zb_v}", "{schedule: dualpipe_v}",
                                     "{schedule: interleaved_1f1b, chunks: 2}"}) {
    if (pipeline.find("dualpipe_v") != std::string::npos && 4 < 2 * K) continue;  // needs M >= 2K
    if (pipeline.find("chunks: 2") != std::string::npos && 4 % K != 0) continue;  // M a multiple of K
    if (pipeline.find("_v") != std::string::npos && 2 * K > 9) continue;         // 2K stages of nine layers
    const Trained r = run(deck("bf16", pipeline));
    EXPECT_EQ(r.weights, ref.weights) << pipeline;
    EXPECT_EQ(r.logits, ref.logits) << pipeline;
  }
}

}  // namespace
}  // namespace gpipe

// Pipeline schedules across MPI ranks (ctest runs this at 1, 2, 3 and 4
// ranks): each schedule bitwise equal across K, no deadlock for M = 1..2K+1,
// re-materialization invisible, 1F1B and zero_bubble against fill_drain
// within rounding and bitwise against each other, 1F1B's activation memory
// exactly K/M of fill_drain's on cell 0, and zero_bubble's exact bytes.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

const std::string kLayers = test::kNineLayers;
constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 16;
using test::world_rank;
using test::world_size;

using Result = test::PipelineRun;

template <class T>
Result train(const std::string& text, MPI_Comm comm, int steps = 2) {
  return test::run_pipeline<T>(parse_deck(text, "test-deck"), test::synthetic(kBatch * 2, kInput, 3, 99), kBatch,
                               comm, steps);
}

std::string deck(int M, const std::string& schedule, const std::string& remat = "never",
                 const std::string& precision = "double") {
  return test::deck_text(kLayers, kInput, kBatch, M, precision,
                         "{schedule: " + schedule + ", remat: " + remat + "}");
}

const char* const kSchedules[] = {"fill_drain", "1f1b", "zero_bubble"};

TEST(Schedules, BitwiseAcrossCellsNoDeadlockRematInvisible) {
  const int K = world_size();
  for (const char* schedule : kSchedules) {
    for (int M = 1; M <= 2 * K + 1; ++M) {
      Result ref;  // K = 1, same schedule and M, on rank 0 alone
      if (world_rank() == 0) ref = train<double>(deck(M, schedule), MPI_COMM_SELF);
      for (const char* remat : {"never", "always", "except_last"}) {
        const Result r = train<double>(deck(M, schedule, remat), MPI_COMM_WORLD);
        if (world_rank() == 0) {
          EXPECT_EQ(r.params, ref.params) << schedule << " M=" << M << " remat " << remat;
          EXPECT_EQ(r.eval_loss, ref.eval_loss) << schedule << " M=" << M << " remat " << remat;
        }
      }
    }
  }
}

// fill_drain accumulates micro-batch gradients in the order M-1..0, 1F1B and
// zero_bubble in 0..M-1 (zero_bubble's B and W ops each run in micro-batch
// order, and a split layer's W adds what its fused backward would): equal up
// to the rounding of the sum's order, and 1F1B and zero_bubble bitwise
// (docs/design.md).
template <class T>
void expect_close_to_fill_drain(const char* precision, double tolerance) {
  for (int M : {1, 3, 8}) {
    const Result fd = train<T>(deck(M, "fill_drain", "never", precision), MPI_COMM_WORLD);
    const Result ofob = train<T>(deck(M, "1f1b", "always", precision), MPI_COMM_WORLD);
    const Result zb = train<T>(deck(M, "zero_bubble", "except_last", precision), MPI_COMM_WORLD);
    if (world_rank() != 0) continue;
    ASSERT_EQ(fd.params.size(), ofob.params.size());
    double worst = 0;
    for (size_t i = 0; i < fd.params.size(); ++i)
      worst = std::max(worst, std::abs(fd.params[i] - ofob.params[i]) /
                                  std::max(1.0, std::abs(fd.params[i])));
    EXPECT_LE(worst, tolerance) << precision << " M=" << M;
    if (M == 1) EXPECT_EQ(fd.params, ofob.params) << "one micro-batch: the same sum";
    EXPECT_EQ(zb.params, ofob.params) << precision << " M=" << M << ": zero_bubble is 1F1B's sum";
    EXPECT_EQ(zb.eval_loss, ofob.eval_loss) << precision << " M=" << M;
  }
}

TEST(Schedules, OneFOneBAndZeroBubbleMatchFillDrainWithinRounding) {
  expect_close_to_fill_drain<double>("double", 1e-12);
  expect_close_to_fill_drain<float>("float", 1e-6);
}

// fill_drain's whole-batch W buffers on each cell (Cell, batch_weight_bytes):
// kBatch x (its Dense layers' output widths + the widest of their inputs,
// the model's first layer aside).
std::vector<std::int64_t> batch_weight_bytes(const std::vector<int>& partition) {
  const std::vector<std::int64_t> in = {6, -1, -1, -1, 10, -1, 8, -1, 5};  // -1: not dense
  const std::vector<std::int64_t> out = {10, -1, -1, -1, 8, -1, 5, -1, 3};
  std::vector<std::int64_t> bytes;
  int first = 0;
  for (int count : partition) {
    std::int64_t outputs = 0, widest = 0;
    for (int l = first; l < first + count; ++l)
      if (out[size_t(l)] > 0) {
        outputs += out[size_t(l)];
        if (l > 0) widest = std::max(widest, in[size_t(l)]);  // layer 0 reads the batch
      }
    bytes.push_back(kBatch * (outputs + widest) * std::int64_t(sizeof(double)));
    first += count;
  }
  return bytes;
}

// Exact K/M on the buffer plan's bytes; fill_drain also holds its
// whole-batch W buffers (M > 1), which 1F1B does not need.
TEST(Schedules, OneFOneBActivationBytesAreKOverMOfFillDrain) {
  const int K = world_size(), M = 8;
  Result fd = train<double>(deck(M, "fill_drain"), MPI_COMM_WORLD, 1);
  const auto batch = batch_weight_bytes(fd.partition);
  for (int k = 0; k < K; ++k) fd.activation_bytes[size_t(k)] -= batch[size_t(k)];
  const Result ofob = train<double>(deck(M, "1f1b"), MPI_COMM_WORLD, 1);
  ASSERT_EQ(fd.activation_bytes.size(), size_t(K));
  if (K > 1) EXPECT_EQ(ofob.activation_bytes[0] * M, fd.activation_bytes[0] * K);
  // The last cell also holds one logits buffer (rows x 3 classes) either way.
  const std::int64_t logits = (kBatch / M) * 3 * std::int64_t(sizeof(double));
  EXPECT_EQ((ofob.activation_bytes[size_t(K - 1)] - logits) * M,
            fd.activation_bytes[size_t(K - 1)] - logits);
  for (int k = 0; k + 1 < K; ++k)
    EXPECT_EQ(ofob.activation_bytes[size_t(k)] * M, fd.activation_bytes[size_t(k)] * (K - k)) << k;
}

// zero_bubble holds min(M, K) micro-batches on every cell (1F1B: min(M,
// K - k)) plus, from B to W, the output gradients of the cell's Dense
// layers other than its last: min(k + 1, M - w + 1, M) sets, w = min(M,
// K - k - 1) (pipeline/buffer_plan.hpp). Cell 0 thus uses 1F1B's bytes plus
// one set of them.
TEST(Schedules, ZeroBubbleActivationBytesExact) {
  const int K = world_size(), M = 8;
  const Result ofob = train<double>(deck(M, "1f1b"), MPI_COMM_WORLD, 1);
  const Result zb = train<double>(deck(M, "zero_bubble"), MPI_COMM_WORLD, 1);
  const std::vector<std::int64_t> dense_units = {10, -1, -1, -1, 8, -1, 5, -1, 3};  // -1: not dense
  const std::int64_t rows = kBatch / M, logits = rows * 3 * std::int64_t(sizeof(double));
  int first = 0;
  for (int k = 0; k < K; ++k) {
    const int count = zb.partition[size_t(k)];
    std::int64_t kept = 0;  // one set of kept output gradients
    for (int l = first; l + 1 < first + count; ++l)
      if (dense_units[size_t(l)] > 0) kept += rows * dense_units[size_t(l)] * std::int64_t(sizeof(double));
    first += count;
    const int w = std::min(M, K - k - 1);
    const std::int64_t sets = std::min({k + 1, M - w + 1, M});
    // Per micro-batch bytes: 1F1B's total over its min(M, K - k) slots (the
    // last cell's logits buffer aside), times min(M, K) slots.
    const std::int64_t fixed = k + 1 == K ? logits : 0;
    const std::int64_t per_slot = (ofob.activation_bytes[size_t(k)] - fixed) / std::min(M, K - k);
    EXPECT_EQ(zb.activation_bytes[size_t(k)], per_slot * std::min(M, K) + fixed + sets * kept)
        << "cell " << k;
    if (k == 0) EXPECT_EQ(zb.activation_bytes[0], ofob.activation_bytes[0] + kept);
  }
}

}  // namespace
}  // namespace gpipe

// An emulated (synthetic-layer) deck through the real pipeline (ctest runs
// this at 1, 2, 3 and 4 ranks): every schedule runs, including zero_bubble's
// split B and W ops, the data path is the copy (the loss equals the one K = 1
// computes, bitwise), and the layers' parameters are real but never change
// (their gradients are 0).

#include <gtest/gtest.h>
#include <mpi.h>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

constexpr std::int64_t kInput = 6, kBatch = 12;

// Widths 6 -> 5 -> 7 -> 4 -> 3: narrowing and widening copies; 3 logits.
const std::string kLayers =
    "[{type: synthetic, units: 5, forward_us: 20, params: 3},"
    " {type: synthetic, units: 7, forward_us: 10, backward_input_us: 5, backward_weights_us: 0},"
    " {type: synthetic, units: 4, forward_us: 0, params: 2},"
    " {type: synthetic, units: 3, forward_us: 30, backward_weights_us: 15, params: 4}]";

using Result = test::PipelineRun;

Result train(const std::string& schedule, MPI_Comm comm) {
  const Deck deck = parse_deck(test::deck_text(kLayers, kInput, kBatch, 3, "double",
                                               "{schedule: " + schedule + "}"),
                               "synthetic-deck");
  return test::run_pipeline(deck, test::synthetic(kBatch * 2, kInput, 3, 17), kBatch, comm);
}

TEST(Synthetic, EmulatedDeckRunsEverySchedulePassingDataThrough) {
  for (const char* schedule : {"fill_drain", "1f1b", "zero_bubble"}) {
    Result ref;
    if (test::world_rank() == 0) ref = train(schedule, MPI_COMM_SELF);
    const Result r = train(schedule, MPI_COMM_WORLD);
    if (test::world_rank() != 0) continue;
    EXPECT_EQ(r.eval_loss, ref.eval_loss) << schedule;
    EXPECT_GT(r.eval_loss, 0.0) << schedule;
    ASSERT_EQ(r.params.size(), size_t(3 + 2 + 4)) << schedule;
    EXPECT_EQ(r.params, ref.params) << schedule;
    for (double p : r.params) EXPECT_EQ(p, 0.0) << schedule << ": zero gradients never move a parameter";
  }
}

}  // namespace
}  // namespace gpipe

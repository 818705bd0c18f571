// Inputs found by attacking issues 22-23's features as a user would:
// pipeline.w_group above training.micro_batches (clamped, with a note that
// names both keys), and decks stored in checkpoints by earlier versions that
// this version's stricter parse rejects.

#include <gtest/gtest.h>

#include <string>

#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/schedule.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

const char* kLayers =
    "model:\n  input: 4\n  layers: [{type: dense, units: 4}, {type: relu}, {type: dense, units: 4}, {type: relu}, "
    "{type: dense, units: 2}]\n"
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n";

Deck grouped(const std::string& schedule, int M, int w_group) {
  return parse_deck(std::string(kLayers) + "training: {epochs: 1, batch_size: 8, micro_batches: " +
                        std::to_string(M) + "}\npipeline: {schedule: " + schedule +
                        ", w_group: " + std::to_string(w_group) + "}\n",
                    "deck.yaml");
}

// w_group is the most micro-batches one W covers: above M it is M (one W
// of the whole batch per stage), for every schedule with W ops, and the
// reports say so (perf/schedules_table.sh sweeps zero_bubble:8 over M = 1..8).
TEST(WGroupClamp, AboveMicroBatchesIsTheWholeBatchWithANote) {
  for (const char* schedule : {"zero_bubble", "zb_v", "dualpipe_v"})
    for (int M = 1; M <= 8; ++M) {
      if (std::string(schedule) == "dualpipe_v" && M < 4) continue;  // needs M >= 2K
      SCOPED_TRACE(std::string(schedule) + " M " + std::to_string(M));
      const Deck big = grouped(schedule, M, 8), exact = grouped(schedule, M, M);
      const Schedule a = deck_schedule(big, 2), b = deck_schedule(exact, 2);
      EXPECT_EQ(a.ops, b.ops);
      EXPECT_EQ(w_group_note(exact), "");
      if (M == 8) {
        EXPECT_EQ(w_group_note(big), "");
      } else {
        EXPECT_EQ(w_group_note(big),
                  "pipeline.w_group = 8 is more than training.micro_batches = " + std::to_string(M) +
                      ": clamped to " + std::to_string(M) + " (each stage runs one W op over the whole batch)");
      }
    }
  // Every stage's W is one op covering all micro-batches.
  const Schedule s = deck_schedule(grouped("zero_bubble", 3, 100), 2);
  for (const auto& ops : s.ops) {
    int w = 0;
    for (const Op& op : ops)
      if (op.kind == OpKind::BackwardWeights) {
        ++w;
        EXPECT_EQ(op.count, 3);
      }
    EXPECT_EQ(w, 1);
  }
  // A schedule without W ops is still an error, whatever the value.
  try {
    deck_schedule(grouped("1f1b", 2, 8), 2);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline.w_group: 8 needs a schedule with W ops (zero_bubble, zb_v or dualpipe_v); "
                           "pipeline.schedule 1f1b has none");
  }
}

}  // namespace
}  // namespace gpipe

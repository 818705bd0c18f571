// Inputs found by attacking issues 22-23's features as a user would:
// pipeline.w_group above training.micro_batches (clamped, with a note that
// names both keys), and decks stored in checkpoints by earlier versions that
// this version's stricter parse rejects (parse_stored_deck, restart_position).

#include <gtest/gtest.h>

#include <string>

#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/schedule.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/train/plan.hpp"
#include "gpipe/train/restart.hpp"

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

// The decks an earlier version stored in checkpoints with fp16's loss-scale
// keys and precision bf16 (it accepted and ignored them): today's parse_deck
// refuses them, so gpipe-infer failed on such a checkpoint and a restart
// silently skipped its deck-changed check. parse_stored_deck drops the keys
// unread for every precision without loss scaling, values unchecked.
const std::string kOldTraining =
    "training: {epochs: 1, batch_size: 8, micro_batches: 2, loss_scale: 1024, loss_scale_growth_interval: 10, "
    "loss_scale_growth: 3, loss_scale_backoff: 0.25}\n";

std::string parse_error(const std::string& text, bool stored) {
  try {
    if (stored)
      parse_stored_deck(text, "ckpt.h5 (deck)");
    else
      parse_deck(text, "ckpt.h5 (deck)");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(StoredDeck, Fp16LossScaleKeysWithBf16StillLoad) {
  const std::string old = std::string(kLayers) + "precision: bf16\n" + kOldTraining;
  EXPECT_EQ(parse_error(old, false),
            "ckpt.h5 (deck):6:56: training.loss_scale: dynamic loss scaling is for precision fp16 only (precision "
            "is bf16); remove the key or set precision: fp16");
  const Deck d = parse_stored_deck(old, "ckpt.h5 (deck)");
  EXPECT_EQ(d.precision, "bf16");
  EXPECT_EQ(d.training.batch_size, 8);
  EXPECT_EQ(d.training.micro_batches, 2);
  const TrainingSpec defaults;  // the keys are dropped unread
  EXPECT_EQ(d.training.loss_scale, defaults.loss_scale);
  EXPECT_EQ(d.training.loss_scale_growth_interval, defaults.loss_scale_growth_interval);
  EXPECT_EQ(d.training.loss_scale_growth, defaults.loss_scale_growth);
  EXPECT_EQ(d.training.loss_scale_backoff, defaults.loss_scale_backoff);
  EXPECT_EQ(d.text.find("loss_scale"), std::string::npos);
  EXPECT_EQ(d.data.train_images, "a");
  // Values outside today's domains too, with float (and the default precision, float).
  const std::string wild = "training: {epochs: 1, batch_size: 8, loss_scale: 1e30, loss_scale_backoff: 2}\n";
  EXPECT_EQ(parse_stored_deck(std::string(kLayers) + "precision: float\n" + wild, "d").precision, "float");
  EXPECT_EQ(parse_stored_deck(std::string(kLayers) + wild, "d").training.loss_scale, defaults.loss_scale);
  EXPECT_EQ(parse_stored_deck(std::string(kLayers) + "precision: double\n" + wild, "d").precision, "double");
  // With fp16 they are the scaler's settings: read and checked as parse_deck does.
  const Deck f = parse_stored_deck(std::string(kLayers) + "precision: fp16\n" + kOldTraining, "d");
  EXPECT_EQ(f.training.loss_scale, 1024);
  EXPECT_EQ(f.training.loss_scale_growth_interval, 10);
  EXPECT_EQ(f.training.loss_scale_growth, 3);
  EXPECT_EQ(f.training.loss_scale_backoff, 0.25);
  const std::string fp16_wild = std::string(kLayers) + "precision: fp16\n" + wild;
  EXPECT_EQ(parse_error(fp16_wild, true),
            "ckpt.h5 (deck):6:50: training.loss_scale: expected a number in [2^-24, 2^64], got 1e30");
  EXPECT_EQ(parse_error(fp16_wild, true), parse_error(fp16_wild, false));
  // Nothing else is relaxed: a key unknown today is still an error.
  EXPECT_EQ(parse_error(std::string(kLayers) + "precision: bf16\ntraining: {epochs: 1, batch_size: 8, lr_decay: 2}\n",
                        true),
            "ckpt.h5 (deck):6:38: unknown key 'lr_decay' in training (expected one of: epochs, batch_size, "
            "micro_batches, shuffle, progress_every, nonfinite, loss_scale, loss_scale_growth_interval, "
            "loss_scale_growth, loss_scale_backoff)");
}

// A checkpoint written through the C API stores a deck without data.
TEST(StoredDeck, WithoutADataSectionLoads) {
  const std::string capi = "model:\n  input: 4\n  layers: [{type: dense, units: 2}]\ntraining: {epochs: 1, batch_size: 8}\n";
  EXPECT_EQ(parse_error(capi, false), "ckpt.h5 (deck): missing required section 'data'");
  const Deck d = parse_stored_deck(capi, "ckpt.h5 (deck)");
  EXPECT_EQ(d.data.train_images, "");
  EXPECT_EQ(d.data.train_file, "");
  EXPECT_EQ(d.model.input_features, 4);
}

CheckpointInfo written_with(const std::string& stored_deck, std::int64_t epoch, std::int64_t epoch_samples) {
  CheckpointInfo info;
  info.step = 8;
  info.epoch = epoch;
  info.deck = stored_deck;
  info.batch_size = 8;
  info.train_samples = 256;
  info.epoch_samples = epoch_samples;
  info.epoch_loss_samples = epoch_samples;
  return info;
}

std::string restart_error(const CheckpointInfo& info, const Deck& d) {
  try {
    restart_position(info, "ckpt.h5", d, 256);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// The old bf16 deck is compared now: a changed training set mid-epoch stops
// the restart (before, the unparsed deck made it resume silently).
TEST(StoredDeck, RestartComparesAnOldBf16Deck) {
  const std::string old = std::string(kLayers) + "precision: bf16\n" + kOldTraining;
  const std::string now_text =
      std::string(kLayers) + "precision: bf16\ntraining: {epochs: 1, batch_size: 8, micro_batches: 2}\n";
  const Deck same = parse_deck(now_text, "deck.yaml"), other = parse_deck(now_text, "deck.yaml", {"seed=3"});
  std::string skipped = "untouched";
  std::vector<std::string> changed;
  const DataPosition p = restart_position(written_with(old, 0, 128), "ckpt.h5", same, 256, &changed, &skipped);
  EXPECT_EQ(p.epoch_samples, 128);
  EXPECT_TRUE(changed.empty());
  EXPECT_EQ(skipped, "");
  EXPECT_EQ(restart_error(written_with(old, 0, 128), other),
            "ckpt.h5: cannot resume in the middle of epoch 1 (128 of its samples trained): the deck changed seed "
            "since the checkpoint was written, so the position in the epoch's data no longer applies; restore the "
            "previous values or restart from an end-of-epoch checkpoint");
}

// A stored deck that still cannot be compared: an error mid-epoch (the
// position depends on the check), a warning at an epoch boundary.
TEST(StoredDeck, RestartNamesAnUncomparableDeck) {
  const Deck now = parse_deck(std::string(kLayers) + "training: {epochs: 1, batch_size: 8}\n", "deck.yaml");
  const std::string checked =
      "so whether the training set or its order changed (data.format, data.train_images, data.train_labels, "
      "data.train_file, data.inputs_dataset, data.labels_dataset, data.train_limit, training.shuffle, seed) cannot "
      "be checked";
  const std::string foreign = "[1, 2]";
  EXPECT_EQ(restart_error(written_with(foreign, 0, 128), now),
            "ckpt.h5: cannot resume in the middle of epoch 1 (128 of its samples trained): the deck stored in the "
            "checkpoint cannot be compared with this deck (ckpt.h5 (deck): expected a YAML map of sections (model, "
            "data, training, optimizer, pipeline)), " + checked + "; restart from an end-of-epoch checkpoint");
  std::string skipped;
  const DataPosition p = restart_position(written_with(foreign, 2, 0), "ckpt.h5", now, 256, nullptr, &skipped);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(skipped,
            "ckpt.h5: the deck stored in the checkpoint cannot be compared with this deck (ckpt.h5 (deck): expected "
            "a YAML map of sections (model, data, training, optimizer, pipeline)), " + checked +
                ": that check was skipped (resuming at the start of epoch 3)");
  const std::string capi = "model:\n  input: 4\n  layers: [{type: dense, units: 2}]\ntraining: {epochs: 1, batch_size: 8}\n";
  restart_position(written_with(capi, 1, 0), "ckpt.h5", now, 256, nullptr, &skipped);
  EXPECT_EQ(skipped, "ckpt.h5: the deck stored in the checkpoint cannot be compared with this deck (it has no data "
                     "section), " + checked + ": that check was skipped (resuming at the start of epoch 2)");
  EXPECT_EQ(restart_error(written_with(capi, 1, 64), now),
            "ckpt.h5: cannot resume in the middle of epoch 2 (64 of its samples trained): the deck stored in the "
            "checkpoint cannot be compared with this deck (it has no data section), " + checked +
                "; restart from an end-of-epoch checkpoint");
}

}  // namespace
}  // namespace gpipe

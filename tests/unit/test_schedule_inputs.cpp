// Input errors around schedules found by attacking issues 21-23's features:
// a schedule file's name written unquoted (every `gpipe-plan --tune` file,
// named "tuned: ...", failed to load: "illegal map value"), duplicate keys
// in a schedule file taken silently (yaml-cpp keeps the first), a
// forward-only schedule file that trains nothing, and partition errors that
// called a run's stages "cells (MPI ranks)".

#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/schedule_check.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/schedule_v.hpp"
#include "gpipe/predict/costs.hpp"
#include "gpipe/predict/tune.hpp"
#include "gpipe/predict/trace_times.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/pipeline/trace.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

std::string file_text(const Schedule& s, const std::string& name) {
  std::ostringstream out;
  write_schedule(out, s, name);
  return out.str();
}

std::string parse_error(const std::string& text) {
  try {
    parse_schedule_file(text, "s.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// The "name:" line of a written file.
std::string name_line(const std::string& text) {
  const auto at = text.find("\nname: ");
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(ScheduleInputs, NamesThatNeedQuotingRoundTrip) {
  const Schedule s = zb_v(2, 4, Remat::Never);
  // Plain names stay plain (the format's documented example).
  EXPECT_EQ(name_line(file_text(s, "zb_v")), "name: zb_v");
  const std::string tuned = file_text(s, "tuned: zero_bubble (ZB-H1)");
  EXPECT_EQ(name_line(tuned), "name: \"tuned: zero_bubble (ZB-H1)\"");
  EXPECT_EQ(parse_error(tuned), "(no error)");
  EXPECT_EQ(parse_schedule_file(tuned, "s.yaml").ops, s.ops);
  // Another instance: YAML's comment, flow and quote characters.
  for (const std::string name : {"a # b", "[x, y]", "{k: v}", "it's \"quoted\"", "- dash", "&anchor", "*alias"}) {
    const std::string text = file_text(s, name);
    EXPECT_EQ(parse_error(text), "(no error)") << name << "\n" << name_line(text);
    EXPECT_EQ(YAML::Load(text)["name"].as<std::string>(), name);
  }
}

// What gpipe-plan --tune writes ("tuned: " + the best candidate's name)
// loads as a schedule file, with the best candidate's ops.
TEST(ScheduleInputs, TunedScheduleFileLoads) {
  std::string layers;
  for (int l = 0; l < 8; ++l)
    layers += "    - {type: synthetic, units: 8, forward_us: 10, params: 100, backward_weights_us: 4}\n";
  const Deck deck = parse_deck("model:\n  input: 8\n  layers:\n" + layers +
                                   "data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}\n"
                                   "training: {epochs: 1, batch_size: 64, micro_batches: 8}\n"
                                   "pipeline: {schedule: zero_bubble}\n",
                               "deck.yaml");
  PredictOptions options;
  options.costs.synthetic = synthetic_layers(deck);
  options.network.p2p = options.network.allreduce = LinkModel{};
  options.optimizer_bytes_per_s = 1e300;
  const TuneResult t = tune(deck, 4, options, 4);
  ASSERT_GE(t.best, 0);
  for (const auto& c : t.candidates) {  // every candidate's name, not only the best's
    const std::string text = file_text(c.schedule, "tuned: " + c.name);
    EXPECT_EQ(parse_error(text), "(no error)") << c.name;
    EXPECT_EQ(parse_schedule_file(text, "s.yaml").ops, c.schedule.ops) << c.name;
  }
}

TEST(ScheduleInputs, DuplicateKeysAreErrors) {
  const std::string good = file_text(one_f_one_b(2, 2, Remat::Never), "1f1b");
  // Line 5 is "cells: 2"; yaml-cpp would keep the first silently.
  std::string cells = good;
  cells.replace(cells.find("cells: 2\n"), 9, "cells: 2\ncells: 3\n");
  EXPECT_EQ(parse_error(cells), "s.yaml:6:1: cells: duplicate key (first given at s.yaml:5:1; a key may appear once)");
  // Another instance: a second ops list at the end (which would have been ignored).
  EXPECT_EQ(parse_error(good + "ops:\n  - [0, 0, F, 0]\n"),
            "s.yaml:19:1: ops: duplicate key (first given at s.yaml:10:1; a key may appear once)");
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string deck_schedule_error(const std::string& path, int cells, int M) {
  Deck deck;
  deck.training.micro_batches = M;
  deck.pipeline.schedule_file = path;
  try {
    deck_schedule(deck, cells);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Drops every line of `text` holding one of `kinds` (", B," ...).
std::string without(std::string text, const std::vector<std::string>& kinds) {
  std::istringstream in(text);
  std::string out, line;
  while (std::getline(in, line)) {
    bool drop = false;
    for (const auto& k : kinds) drop = drop || line.find(k) != std::string::npos;
    if (!drop) out += line + "\n";
  }
  return out;
}

TEST(ScheduleInputs, ForwardOnlyScheduleFileDoesNotTrain) {
  const std::string fwd = write_file("gpipe_brk_forward_only.yaml",
                                     without(file_text(one_f_one_b(2, 4, Remat::Never), "1f1b"), {", B,"}));
  EXPECT_EQ(parse_error(without(file_text(one_f_one_b(2, 4, Remat::Never), "1f1b"), {", B,"})), "(no error)");
  EXPECT_EQ(deck_schedule_error(fwd, 2, 4),
            fwd + ": pipeline.schedule_file: the schedule has no backward op (F only: it would train nothing); "
                  "training needs B, or I and W, of every stage and micro-batch");
  // Another instance: a re-materialized one with F and R only.
  const std::string fr = write_file("gpipe_brk_forward_recompute.yaml",
                                    without(file_text(fill_drain(2, 3, Remat::Always), "fd"), {", B,", ", G,"}));
  EXPECT_NE(std::string(file_text(fill_drain(2, 3, Remat::Always), "fd")).find(", R,"), std::string::npos);
  EXPECT_EQ(deck_schedule_error(fr, 2, 3),
            fr + ": pipeline.schedule_file: the schedule has no backward op (F only: it would train nothing); "
                 "training needs B, or I and W, of every stage and micro-batch");
  // The complete file trains.
  const std::string full = write_file("gpipe_brk_full.yaml", file_text(one_f_one_b(2, 4, Remat::Never), "1f1b"));
  EXPECT_EQ(deck_schedule_error(full, 2, 4), "(no error)");
  for (const auto& p : {fwd, fr, full}) std::remove(p.c_str());
}

// pipeline.chunks beside a schedule file was ignored without a word (the
// file's stages are the layout), as pipeline.w_group was refused.
TEST(ScheduleInputs, ChunksWithAScheduleFileAreAnError) {
  const std::string full = write_file("gpipe_brk_chunks.yaml", file_text(one_f_one_b(2, 4, Remat::Never), "1f1b"));
  Deck deck;
  deck.training.micro_batches = 4;
  deck.pipeline.schedule_file = full;
  deck.pipeline.chunks = 2;
  try {
    deck_schedule(deck, 2);
    ADD_FAILURE() << "chunks accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              full + ": pipeline.chunks: 2 does not apply to a schedule file (its stages and rank_of_stage are the "
                     "layout; write them with gpipe-plan --schedule interleaved_1f1b --set pipeline.chunks=2 --print)");
  }
  deck.pipeline.chunks = 1;
  EXPECT_NO_THROW(deck_schedule(deck, 2));
  std::remove(full.c_str());
}

// Partition errors name stages, and where their count comes from, when a
// cell runs several (before: "6 cells (MPI ranks) but the model has only 5
// layers ... (run with at most 5 ranks)" for zb_v on 3 ranks).
std::string stage_error(const std::string& pipeline, int stages, int cells) {
  const Deck deck = parse_deck(
      "model:\n  input: 4\n  layers: [{type: dense, units: 4}, {type: relu}, {type: dense, units: 4}, {type: relu}, "
      "{type: dense, units: 2}]\n"
      "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
      "training: {epochs: 1, batch_size: 12, micro_batches: 6}\n"
      "pipeline: " + pipeline + "\n",
      "deck.yaml");
  try {
    deck_partition(deck, stages, std::vector<double>(5, 1.0), cells);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ScheduleInputs, PartitionErrorsNameStages) {
  EXPECT_EQ(stage_error("{schedule: zb_v}", 6, 3),
            "pipeline: 6 stages (pipeline.schedule zb_v: two per cell on 3 cells) but the model has only 5 layers; "
            "every stage needs at least one layer (run with at most 2 cells)");
  EXPECT_EQ(stage_error("{schedule: interleaved_1f1b, chunks: 3}", 6, 2),
            "pipeline: 6 stages (pipeline.chunks = 3 on 2 cells) but the model has only 5 layers; every stage needs "
            "at least one layer (run with at most 1 cells)");
  EXPECT_EQ(stage_error("{schedule_file: s6.yaml}", 6, 2),
            "pipeline: 6 stages (pipeline.schedule_file s6.yaml on 2 cells) but the model has only 5 layers; every "
            "stage needs at least one layer");
  EXPECT_EQ(stage_error("{schedule: dualpipe_v, balance: [2, 3]}", 4, 2),
            "pipeline.balance: the list has 2 entries but the pipeline has 4 stages (pipeline.schedule dualpipe_v: "
            "two per cell on 2 cells); give one layer count per stage");
  EXPECT_EQ(stage_error("{schedule_file: s3.yaml, balance: [2, 3]}", 3, 2),
            "pipeline.balance: the list has 2 entries but the pipeline has 3 stages (pipeline.schedule_file s3.yaml "
            "on 2 cells); give one layer count per stage");
  // One stage per cell: the messages as before.
  EXPECT_EQ(stage_error("{}", 6, 6),
            "pipeline: 6 cells (MPI ranks) but the model has only 5 layers; every cell needs at least one layer (run "
            "with at most 5 ranks)");
  EXPECT_EQ(stage_error("{balance: [2, 3]}", 3, 3),
            "pipeline.balance: the list has 2 entries but the pipeline has 3 cells (MPI ranks); give one layer count "
            "per cell");
  EXPECT_EQ(stage_error("{schedule: zb_v, balance: [1, 1, 1, 2]}", 4, 2), "(no error)");
}

TEST(ScheduleInputs, ChunksWithAVScheduleSaysTwoStagesPerRank) {
  try {
    make_schedule(ScheduleKind::ZbV, 2, 4, Remat::Never, 2);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline.chunks: 2 chunks per rank need pipeline.schedule: interleaved_1f1b "
                           "(pipeline.schedule zb_v runs two stages per rank in a V, fixed by the schedule)");
  }
  try {
    make_schedule(ScheduleKind::DualPipeV, 2, 4, Remat::Never, 3);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline.chunks: 3 chunks per rank need pipeline.schedule: interleaved_1f1b "
                           "(pipeline.schedule dualpipe_v runs two stages per rank in a V, fixed by the schedule)");
  }
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// --tune-trace: a trace of two stages per cell mixed both stages' event
// times into one cell's (zb_v, interleaved_1f1b with chunks > 1) and was
// tuned as one stage per cell; fill_drain's whole-batch W event was taken as
// one micro-batch's W (M times too long).
std::string write_trace(const std::string& schedule, bool twice) {
  TraceHeader header;
  header.ranks = header.cells = 2;
  header.micro_batches = 4;
  header.schedule = schedule;
  GatheredTrace trace;
  trace.events.resize(2);
  trace.steps.resize(2);
  for (int r = 0; r < 2; ++r) {
    double t = 0;
    const auto add = [&](std::int64_t step, EventKind kind, int m, double seconds) {
      trace.events[size_t(r)].push_back({step, std::int8_t(kind), m, t, t + seconds, 0});
      t += seconds;
    };
    for (std::int64_t step : {0, 1}) {
      for (int m = 0; m < 4; ++m) add(step, EventKind::Forward, m, 1.0 + r);
      if (twice) add(step, EventKind::Forward, 2, 1.0);  // a second stage's F of micro-batch 2
      for (int m = 3; m >= 0; --m) add(step, EventKind::Backward, m, 2.0);
      add(step, EventKind::BackwardWeights, 0, 8.0 * (r + 1));  // fill_drain: the whole-batch W
      StepSummary st;
      st.step = step;
      trace.steps[size_t(r)].push_back(st);
    }
  }
  const std::string path = ::testing::TempDir() + "gpipe_brk_trace_" + std::to_string(twice) + ".h5";
  write_trace_file(path, header, trace);
  return path;
}

std::string trace_error(const std::string& path) {
  try {
    read_trace_times(path);
  } catch (const InputError& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "(no error)";
}

TEST(TuneTraceInputs, WholeBatchWIsSharedByTheMicroBatches) {
  const std::string path = write_trace("fill_drain", false);
  const TraceTimes t = read_trace_times(path);
  std::remove(path.c_str());
  EXPECT_EQ(t.forward, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(t.backward_input, (std::vector<double>{2.0, 2.0}));
  EXPECT_EQ(t.backward_weights, (std::vector<double>{2.0, 4.0}));  // 8 / M, 16 / M
  // The same events under zero_bubble are one W for 4 forwards a step: a
  // grouped W (pipeline.w_group 4), shared by its micro-batches the same way.
  const std::string zb = write_trace("zero_bubble", false);
  EXPECT_EQ(read_trace_times(zb).backward_weights, (std::vector<double>{2.0, 4.0}));
  std::remove(zb.c_str());
}

// A trace whose op times are not finite (or negative): before, the medians
// were NaN (or negative), every candidate's simulated step NaN, and --tune
// wrote a schedule "tuned" from them with exit status 0.
TEST(TuneTraceInputs, NonFiniteOrNegativeTimesAreErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Case {
    double start, end;
    std::string shown;
  };
  for (const Case& c : {Case{0.0, nan, "start 0 and end nan"}, Case{-inf, 1.0, "start -inf and end 1"},
                        Case{2.0, 1.0, "start 2 and end 1"}}) {
    TraceHeader header;
    header.ranks = header.cells = 2;
    header.micro_batches = 2;
    header.schedule = "1f1b";
    GatheredTrace trace;
    trace.events.resize(2);
    trace.steps.resize(2);
    for (int r = 0; r < 2; ++r) {
      for (int m = 0; m < 2; ++m) trace.events[size_t(r)].push_back({1, std::int8_t(EventKind::Forward), m, 0.0, 1.0, 0});
      for (int m = 0; m < 2; ++m) trace.events[size_t(r)].push_back({1, std::int8_t(EventKind::Backward), m, 1.0, 2.0, 0});
      StepSummary st;
      st.step = 1;
      trace.steps[size_t(r)].push_back(st);
    }
    trace.events[1][3].start = c.start;  // rank 1's backward of micro-batch 1
    trace.events[1][3].end = c.end;
    const std::string path = ::testing::TempDir() + "gpipe_brk_trace_nonfinite.h5";
    write_trace_file(path, header, trace);
    EXPECT_EQ(trace_error(path), path + ": /rank_0001/events[3] (gpipe::backward of step 1, micro-batch 1): " + c.shown +
                                     " are not a finite interval (end >= start); --tune-trace tunes from measured "
                                     "times only");
  }
}

TEST(TuneTraceInputs, SeveralStagesPerCellAreErrors) {
  for (const std::string v : {"zb_v", "dualpipe_v"}) {
    const std::string path = write_trace(v, false);
    EXPECT_EQ(trace_error(path), path + ": --tune-trace takes a trace of one stage per cell (fill_drain, 1f1b, "
                                        "zero_bubble); this trace ran " + v + ", two stages per cell");
  }
  const std::string il = write_trace("interleaved_1f1b", true);
  EXPECT_EQ(trace_error(il), il + ": rank 0 runs the forward of micro-batch 2 twice in step 1 (several stages per "
                                  "cell; schedule interleaved_1f1b): --tune-trace takes a trace of one stage per "
                                  "cell (fill_drain, 1f1b, zero_bubble)");
  const std::string file = write_trace("file v.yaml", true);
  EXPECT_EQ(trace_error(file), file + ": rank 0 runs the forward of micro-batch 2 twice in step 1 (several stages "
                                      "per cell; schedule file v.yaml): --tune-trace takes a trace of one stage per "
                                      "cell (fill_drain, 1f1b, zero_bubble)");
  // interleaved_1f1b with one chunk (one stage per cell) reads.
  EXPECT_EQ(trace_error(write_trace("interleaved_1f1b", false)), "(no error)");
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

const char* kFiveLayers =
    "model:\n  input: 4\n  layers: [{type: dense, units: 4}, {type: relu}, {type: dense, units: 4}, {type: relu}, "
    "{type: dense, units: 2}]\n"
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n";

std::string plan_error(const Deck& deck, int ranks) {
  try {
    plan_run(deck, ranks);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// gpipe-infer builds its pipeline from the checkpoint's training deck: the
// training schedule's keys made a forward pass fail (a schedule file absent
// where it runs, dualpipe_v's M >= 2K, interleaved_1f1b's M a multiple of K).
TEST(ForwardOnlyLayout, TrainingScheduleKeysDoNotStopAForwardPass) {
  Deck file = parse_deck(std::string(kFiveLayers) +
                             "training: {epochs: 1, batch_size: 8, micro_batches: 4}\n"
                             "pipeline: {schedule_file: /nonexistent/gpipe_brk.yaml}\n",
                         "deck.yaml");
  EXPECT_EQ(plan_error(file, 2), "/nonexistent/gpipe_brk.yaml: cannot open schedule file (missing or unreadable)");
  forward_only_layout(file);
  EXPECT_EQ(plan_error(file, 2), "(no error)");
  EXPECT_EQ(file.pipeline.schedule_file, "");
  EXPECT_EQ(file.pipeline.schedule, ScheduleKind::FillDrain);

  Deck v = parse_deck(std::string(kFiveLayers) +
                          "training: {epochs: 1, batch_size: 8, micro_batches: 1}\n"
                          "pipeline: {schedule: dualpipe_v, balance: [1, 1, 1, 2], w_group: 2, memory_budget: 1KiB}\n",
                      "deck.yaml");
  EXPECT_EQ(plan_error(v, 2), "training.micro_batches: dualpipe_v needs at least 2 x cells = 4 micro-batches "
                              "(DualPipeV's warm-up), got 1");
  forward_only_layout(v);
  EXPECT_EQ(plan_error(v, 2), "(no error)");
  EXPECT_EQ(plan_run(v, 2).partition.counts, (std::vector<int>{1, 4}));  // balance params: the first Dense alone
  EXPECT_EQ(v.pipeline.w_group, 1);
  EXPECT_EQ(v.pipeline.memory_budget, 0);

  Deck il = parse_deck(std::string(kFiveLayers) +
                           "training: {epochs: 1, batch_size: 8, micro_batches: 4}\n"
                           "pipeline: {schedule: interleaved_1f1b, chunks: 2, balance: [1, 1, 1, 2]}\n",
                       "deck.yaml");
  EXPECT_EQ(plan_error(il, 3), "training.micro_batches: interleaved_1f1b with pipeline.chunks = 2 needs a multiple "
                               "of the 3 pipeline cells, not 4");
  forward_only_layout(il);
  EXPECT_EQ(plan_error(il, 3), "(no error)");
  EXPECT_EQ(il.pipeline.chunks, 1);
  // One stage per cell: an explicit list stays.
  Deck plain = parse_deck(std::string(kFiveLayers) +
                              "training: {epochs: 1, batch_size: 8, micro_batches: 4}\n"
                              "pipeline: {schedule: 1f1b, balance: [2, 3]}\n",
                          "deck.yaml");
  forward_only_layout(plain);
  EXPECT_EQ(plan_run(plain, 2).partition.counts, (std::vector<int>{2, 3}));
}

// A run from a schedule file reports the file, not the deck's (unused)
// pipeline.schedule, and no analytical bubble.
TEST(ScheduleLabels, ScheduleFileRunsReportTheFile) {
  Deck d = parse_deck(std::string(kFiveLayers) +
                          "training: {epochs: 1, batch_size: 8, micro_batches: 4}\n"
                          "pipeline: {schedule: 1f1b, remat: always}\n",
                      "deck.yaml");
  EXPECT_EQ(schedule_label(d), "1f1b");
  EXPECT_EQ(remat_label(d), "always");
  EXPECT_DOUBLE_EQ(analytical_bubble(d, 2), 1.0 / 5);  // (K - 1) / (M + K - 1)
  d.pipeline.schedule = ScheduleKind::ZeroBubble;
  EXPECT_DOUBLE_EQ(analytical_bubble(d, 2), 1.0 / 13);  // (K - 1) / (3M + K - 1)
  d.pipeline.schedule_file = "s.yaml";
  EXPECT_EQ(schedule_label(d), "file s.yaml");
  EXPECT_EQ(remat_label(d), "from the schedule file");
  EXPECT_TRUE(std::isnan(analytical_bubble(d, 2)));
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// fp16's overflow skips were reported as "(training.nonfinite: skip_step)"
// even with training.nonfinite: abort (an overflow is skipped whatever it says).
TEST(SkippedStepsReason, NamesLossScalingInFp16) {
  const auto reason = [](const std::string& precision, const std::string& nonfinite) {
    return skipped_steps_reason(parse_deck(std::string(kFiveLayers) + "precision: " + precision +
                                               "\ntraining: {epochs: 1, batch_size: 8, micro_batches: 4, nonfinite: " +
                                               nonfinite + "}\n",
                                           "deck.yaml"));
  };
  EXPECT_EQ(reason("fp16", "abort"), "fp16 gradient overflow (dynamic loss scaling, training.loss_scale*)");
  EXPECT_EQ(reason("fp16", "skip_step"), "fp16 gradient overflow (dynamic loss scaling, training.loss_scale*) or a "
                                         "non-finite loss (training.nonfinite: skip_step)");
  EXPECT_EQ(reason("bf16", "skip_step"), "non-finite loss or gradients (training.nonfinite: skip_step)");
  EXPECT_EQ(reason("float", "skip_step"), "non-finite loss or gradients (training.nonfinite: skip_step)");
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// pipeline.w_group on a schedule without W ops named fill_drain (and
// offered schedule files, which reject w_group) whatever the schedule was.
TEST(GroupedWInputs, ErrorNamesTheDecksSchedule) {
  const auto error = [](ScheduleKind kind, int chunks) {
    try {
      make_schedule(kind, 2, 4, Remat::Never, chunks, 2);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error(ScheduleKind::OneFOneB, 1),
            "pipeline.w_group: 2 needs a schedule with W ops (zero_bubble, zb_v or dualpipe_v); pipeline.schedule "
            "1f1b has none");
  EXPECT_EQ(error(ScheduleKind::Interleaved1F1B, 2),
            "pipeline.w_group: 2 needs a schedule with W ops (zero_bubble, zb_v or dualpipe_v); pipeline.schedule "
            "interleaved_1f1b has none");
  EXPECT_EQ(error(ScheduleKind::FillDrain, 1),
            "pipeline.w_group: 2 needs a schedule with W ops (zero_bubble, zb_v or dualpipe_v); pipeline.schedule "
            "fill_drain has none (fill_drain's whole-batch W is one GEMM already)");
  EXPECT_EQ(error(ScheduleKind::ZbV, 1), "(no error)");
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// A G (whole-batch W) on a stage whose backwards are split into I and W
// computed the weight gradient twice: check_schedule accepted the file and
// the run trained on doubled gradients (train loss 2.59 against 0.94).
TEST(ScheduleInputs, WholeBatchWOnASplitStageIsAnError) {
  const auto G = [](int stage) {
    for (int k = 0; k < 64; ++k)
      if (op_letter(OpKind(k)) == 'G') return Op{OpKind(k), 0, stage};
    return Op{};
  };
  const auto message = [](const Schedule& s) {
    try {
      check_schedule(s, "s.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Schedule zb = zero_bubble(2, 4, Remat::Never);
  ASSERT_EQ(zb.ops[0].size(), 12u);
  zb.ops[0].push_back(G(0));
  EXPECT_EQ(message(zb), "s.yaml: rank 0, op 12 (G(0) of stage 0): stage 0 splits the backward of micro-batch 0 (I and "
                         "W): its W computes the weight gradient, a whole-batch W (G) would add it again");
  // Another instance: one split micro-batch (3) among fused ones, on rank 1.
  Schedule mixed = fill_drain(2, 4, Remat::Never);  // F0..3, B3..0, G per rank
  auto& ops = mixed.ops[1];
  ASSERT_EQ(ops[4].kind, OpKind::Backward);
  ASSERT_EQ(ops[4].micro_batch, 3);
  ops[4].kind = OpKind::BackwardInput;
  ops.insert(ops.begin() + 5, Op{OpKind::BackwardWeights, 3, 1});
  EXPECT_EQ(message(mixed), "s.yaml: rank 1, op 9 (G(0) of stage 1): stage 1 splits the backward of micro-batch 3 (I "
                            "and W): its W computes the weight gradient, a whole-batch W (G) would add it again");
  EXPECT_EQ(message(fill_drain(2, 4, Remat::Never)), "(no error)");
}

}  // namespace
}  // namespace gpipe

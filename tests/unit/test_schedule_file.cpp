// Schedules as files (pipeline/schedule_file.hpp): the exact text, a round
// trip for every generator, errors naming the file, line and first bad op,
// deck_schedule; gpipe-plan's model on the V schedules (a synthetic deck,
// exact) and --tune against ZB-H1 (predict/tune.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/schedule_check.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/schedule_memory.hpp"
#include "gpipe/pipeline/schedule_v.hpp"
#include "gpipe/predict/predict.hpp"
#include "gpipe/predict/tune.hpp"
#include "gpipe/predict/trace_times.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe {
namespace {

std::string file_text(const Schedule& s, const std::string& name) {
  std::ostringstream out;
  write_schedule(out, s, name);
  return out.str();
}

std::string error_of(const std::string& text, const std::string& source = "s.yaml") {
  try {
    parse_schedule_file(text, source);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ScheduleFile, ExactText) {
  EXPECT_EQ(file_text(zb_v(1, 1, Remat::Never), "zb_v"),
            "# gpipe schedule (docs/file-formats.md, \"Schedule files\"): ops as [rank, stage, kind, micro-batch],\n"
            "# kind F forward, R recompute, B backward, I input-gradient half, W weight-gradient half, G whole-batch W; "
            "a grouped W [rank, stage, W, first micro-batch, count]\n"
            "format: gpipe-schedule/1\n"
            "name: zb_v\n"
            "cells: 1\n"
            "stages: 2\n"
            "micro_batches: 1\n"
            "rank_of_stage: [0, 0]\n"
            "rematerialized: [false]\n"
            "ops:\n"
            "  - [0, 0, F, 0]\n"
            "  - [0, 1, F, 0]\n"
            "  - [0, 1, I, 0]\n"
            "  - [0, 1, W, 0]\n"
            "  - [0, 0, I, 0]\n"
            "  - [0, 0, W, 0]\n");
}

TEST(ScheduleFile, RoundTripsEveryGenerator) {
  for (const auto kind : {ScheduleKind::FillDrain, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubble,
                          ScheduleKind::ZbV, ScheduleKind::DualPipeV})
    for (const auto remat : {Remat::Never, Remat::ExceptLast})
      for (const int group : {1, 3}) {  // w_group 3: grouped W ops, written with their count
        if (group > 1 && (kind == ScheduleKind::FillDrain || kind == ScheduleKind::OneFOneB)) continue;
        const Schedule s = make_schedule(kind, 3, 7, remat, 1, group);
        bool grouped = false;
        for (const auto& ops : s.ops)
          for (const Op& op : ops) grouped = grouped || op.count > 1;
        EXPECT_EQ(grouped, group > 1) << to_string(kind);
        const Schedule back = parse_schedule_file(file_text(s, to_string(kind)), "s.yaml");
        EXPECT_EQ(back.cells, s.cells);
        EXPECT_EQ(back.stages, s.stages);
        EXPECT_EQ(back.micro_batches, s.micro_batches);
        EXPECT_EQ(back.rank_of_stage, s.rank_of_stage);
        EXPECT_EQ(back.rematerialized, s.rematerialized);
        EXPECT_EQ(back.ops, s.ops) << to_string(kind);
      }
}

// group_weights (pipeline.w_group): each stage's W ops merged N consecutive
// micro-batches at a time, where the group's last W was; a group closes at a
// gap in the micro-batches and at the stage's last W.
TEST(GroupWeights, ExactOpListsAndErrors) {
  const auto F = [](int m, int s) { return Op{OpKind::Forward, m, s}; };
  const auto I = [](int m, int s) { return Op{OpKind::BackwardInput, m, s}; };
  const auto W = [](int m, int s, int c = 1) { return Op{OpKind::BackwardWeights, m, s, c}; };
  // zero_bubble(2, 4): cell 0 F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3, cell 1 F0 I0 F1 I1 W0 F2 I2 W1 F3 I3 W2 W3.
  const Schedule two = group_weights(zero_bubble(2, 4, Remat::Never), 2);
  EXPECT_EQ(two.ops[0], (std::vector<Op>{F(0, 0), F(1, 0), I(0, 0), F(2, 0), I(1, 0), W(0, 0, 2), F(3, 0), I(2, 0),
                                         I(3, 0), W(2, 0, 2)}));
  EXPECT_EQ(two.ops[1], (std::vector<Op>{F(0, 1), I(0, 1), F(1, 1), I(1, 1), F(2, 1), I(2, 1), W(0, 1, 2), F(3, 1),
                                         I(3, 1), W(2, 1, 2)}));
  const Schedule three = group_weights(zero_bubble(2, 4, Remat::Never), 3);
  EXPECT_EQ(three.ops[0], (std::vector<Op>{F(0, 0), F(1, 0), I(0, 0), F(2, 0), I(1, 0), F(3, 0), I(2, 0),
                                           W(0, 0, 3), I(3, 0), W(3, 0)}));
  EXPECT_NO_THROW(check_schedule(three));
  EXPECT_EQ(group_weights(zero_bubble(2, 4, Remat::Always), 1).ops, zero_bubble(2, 4, Remat::Always).ops);
  // W ops out of micro-batch order: no group spans the gap.
  Schedule odd = zero_bubble(1, 3, Remat::Never);
  odd.ops[0] = {F(0, 0), F(1, 0), F(2, 0), I(0, 0), I(1, 0), I(2, 0), W(1, 0), W(0, 0), W(2, 0)};
  EXPECT_EQ(group_weights(odd, 3).ops, odd.ops);
  odd.ops[0] = {F(0, 0), F(1, 0), F(2, 0), I(0, 0), I(1, 0), I(2, 0), W(2, 0), W(0, 0), W(1, 0)};
  EXPECT_EQ(group_weights(odd, 3).ops[0].back(), W(0, 0, 2));
  try {
    group_weights(fill_drain(2, 4, Remat::Never), 2);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline.w_group: 2 needs a schedule with W ops (zero_bubble, zb_v, dualpipe_v or a "
                           "schedule file with W ops); this one has none (fill_drain's whole-batch W is one GEMM "
                           "already)");
  }
  try {
    group_weights(zero_bubble(2, 4, Remat::Never), 0);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline.w_group: 0 micro-batches per W op, expected at least 1");
  }
  // The buffer plan keeps each member's buffers until its group's W.
  const CellBufferPlan p = plan_buffers(two, 0);
  EXPECT_EQ(p.weight_group, 2);
  EXPECT_EQ(p.micro_batch.last[0], 5);  // W(0..1) at op 5
  EXPECT_EQ(p.micro_batch.last[1], 5);
  EXPECT_EQ(p.weight_grad.last[0], 5);
  EXPECT_EQ(plan_buffers(zero_bubble(2, 4, Remat::Never), 0).weight_group, 1);
  SlotBytes bytes;
  bytes.weight_group = 1000;
  EXPECT_EQ(planned_bytes(p, bytes), 2000);
  EXPECT_EQ(planned_bytes(plan_buffers(zero_bubble(2, 4, Remat::Never), 0), bytes), 0);
}

TEST(ScheduleFile, ErrorsNameTheFileLineAndFirstBadOp) {
  const std::string good = file_text(one_f_one_b(2, 2, Remat::Never), "1f1b");
  // Lines 11.. are the ops: rank 0's F0 F1 B0 B1, then rank 1's F0 B0 F1 B1.
  EXPECT_EQ(error_of(good), "(no error)");
  std::string bad_kind = good;
  bad_kind.replace(bad_kind.find("[0, 0, B, 0]"), 12, "[0, 0, X, 0]");
  EXPECT_EQ(error_of(bad_kind), "s.yaml:13:12: ops[2] kind: expected F, R, B, I, W or G, got 'X'");
  // The same list when the kind is not a scalar at all, and for a lower-case letter.
  std::string list_kind = good;
  list_kind.replace(list_kind.find("[0, 0, B, 0]"), 12, "[0, 0, [B], 0]");
  EXPECT_EQ(error_of(list_kind), "s.yaml:13:12: ops[2] kind: expected F, R, B, I, W or G, got 'a list or map'");
  std::string lower = good;
  lower.replace(lower.find("[0, 0, B, 0]"), 12, "[0, 0, b, 0]");
  EXPECT_EQ(error_of(lower), "s.yaml:13:12: ops[2] kind: expected F, R, B, I, W or G, got 'b'");
  std::string bad_rank = good;
  bad_rank.replace(bad_rank.find("[1, 1, F, 0]"), 12, "[2, 1, F, 0]");
  EXPECT_EQ(error_of(bad_rank), "s.yaml:15:6: ops[4] rank: 2 outside 0..1");
  std::string twice = good;
  twice.replace(twice.find("[1, 1, B, 1]"), 12, "[1, 1, B, 0]");
  EXPECT_EQ(error_of(twice), "s.yaml: rank 1, op 3 (B(0) of stage 1): runs twice (first at rank 1, op 1)");
  std::string three = good;
  three.replace(three.find("[0, 0, F, 1]"), 12, "[0, 0, F]");
  EXPECT_EQ(error_of(three), "s.yaml:12:5: ops[1]: expected [rank, stage, kind, micro-batch] or, a grouped W, [rank, stage, W, first "
            "micro-batch, count]");
  EXPECT_EQ(error_of(good + "extra: 1\n"), "s.yaml:19:1: unknown key 'extra' (expected format, name, cells, stages, "
                                           "micro_batches, rank_of_stage, rematerialized, ops)");
  std::string format = good;
  format.replace(format.find("gpipe-schedule/1"), 16, "gpipe-schedule/2");
  EXPECT_EQ(error_of(format), "s.yaml:3:9: format: expected gpipe-schedule/1, got 'gpipe-schedule/2'");
  // A grouped W (pipeline.w_group): a fifth entry, the count, on W ops only;
  // checked as the W of each micro-batch it covers. zero_bubble at K = 1,
  // M = 3 grouped by 3: F0 I0 F1 I1 F2 I2 W(0..2) (op 6 on line 17).
  const std::string grouped = file_text(group_weights(zero_bubble(1, 3, Remat::Never), 3), "zb");
  ASSERT_NE(grouped.find("\n  - [0, 0, W, 0, 3]\n"), std::string::npos);
  EXPECT_EQ(error_of(grouped), "(no error)");
  const auto with_op = [&](const std::string& op) {
    std::string t = grouped;
    return t.replace(t.find("[0, 0, W, 0, 3]"), 15, op);
  };
  EXPECT_EQ(error_of(with_op("[0, 0, W, 1, 3]")),
            "s.yaml: rank 0, op 6 (W(1..3) of stage 0): covers micro-batches 1..3, outside 0..2");
  EXPECT_EQ(error_of(with_op("[0, 0, F, 0, 3]")),
            "s.yaml:17:18: ops[6] count: a count (micro-batches covered) needs kind W and at least 1, got F with count 3");
  EXPECT_EQ(error_of(with_op("[0, 0, W, 0, 0]")),
            "s.yaml:17:18: ops[6] count: a count (micro-batches covered) needs kind W and at least 1, got W with count 0");
  EXPECT_EQ(error_of(with_op("[0, 0, W, 0, 2]")), "s.yaml: rank 0 never runs W(2) of stage 0");
  std::string early = with_op("[0, 0, W, 0, 2]");  // W(0..1) before I(1), then W(2)
  early.replace(early.find("  - [0, 0, F, 1]"), 0, "  - [0, 0, W, 0, 2]\n");
  early.replace(early.rfind("[0, 0, W, 0, 2]"), 15, "[0, 0, W, 2]");
  EXPECT_EQ(error_of(early),
            "s.yaml: rank 0, op 2 (W(0..1) of stage 0): runs before I(1) of stage 0 (the W of a split backward "
            "follows its I)");
  EXPECT_EQ(error_of("ops: [\n"), "s.yaml:2:1: end of sequence flow not found");
  try {
    load_schedule("/nonexistent/s.yaml");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/s.yaml: cannot open schedule file (missing or unreadable)");
  }
}

// The checker's position table has 6 x stages x micro_batches entries: a
// file whose lists match 65536 stages and 65536 micro-batches (2^32 pairs,
// about 200 GiB of table) with a handful of ops is refused before it is
// allocated, naming the fields and the limit (the schedule's op count); a
// number without its list, and a grouped W's count near INT_MAX, too.
TEST(ScheduleFile, HugeNumbersFailBeforeAllocating) {
  const int n = 65536;
  std::string stage_map, remat;
  for (int i = 0; i < n; ++i) {
    stage_map += (i ? ", " : "") + std::string(i == 1 ? "1" : "0");
    remat += i ? ", false" : "false";
  }
  const std::string ops = "ops:\n  - [0, 0, F, 0]\n  - [0, 0, F, 1]\n  - [1, 1, F, 0]\n  - [0, 0, B, 0]\n";
  const std::string huge = "format: gpipe-schedule/1\nname: huge\ncells: 2\nstages: 65536\nmicro_batches: 65536\n"
                           "rank_of_stage: [" + stage_map + "]\nrematerialized: [" + remat + "]\n" + ops;
  EXPECT_EQ(error_of(huge),
            "s.yaml: stages x micro_batches: 65536 x 65536 = 4294967296 (stage, micro-batch) pairs, more than the "
            "schedule's 4 ops (the limit: each pair needs an F op of its own); rank 0 never runs F(2) of stage 0");
  // A number alone: its list's length is the bound.
  const std::string small = "format: gpipe-schedule/1\nname: s\ncells: 1\nstages: 1\nmicro_batches: 2\n"
                            "rank_of_stage: [0]\nrematerialized: [false, false]\nops:\n  - [0, 0, F, 0]\n"
                            "  - [0, 0, F, 1]\n  - [0, 0, I, 0]\n  - [0, 0, I, 1]\n  - [0, 0, W, 0, 2]\n";
  EXPECT_EQ(error_of(small), "(no error)");
  std::string stages = small;
  stages.replace(stages.find("stages: 1"), 9, "stages: 2147483647");
  EXPECT_EQ(error_of(stages), "s.yaml: rank_of_stage: expected 2147483647 entries (one per stage), got 1");
  std::string micro = small;
  micro.replace(micro.find("micro_batches: 2"), 16, "micro_batches: 2147483647");
  EXPECT_EQ(error_of(micro), "s.yaml: rematerialized: expected 2147483647 entries (one per micro-batch), got 2");
  std::string cells = small;
  cells.replace(cells.find("cells: 1"), 8, "cells: 2147483647");
  EXPECT_EQ(error_of(cells), "s.yaml:3:8: cells: expected 1..1048576, got 2147483647");
  // micro_batch + count would overflow int: refused by the count, not wrapped.
  std::string count = small;
  count.replace(count.find("[0, 0, W, 0, 2]"), 15, "[0, 0, W, 1, 2147483647]");
  EXPECT_EQ(error_of(count), "s.yaml: rank 0, op 4 (W(1..2147483647) of stage 0): covers micro-batches "
                             "1..2147483647, outside 0..1");
}

TEST(ScheduleFile, DeckScheduleLoadsAndChecksTheFile) {
  const std::string path = ::testing::TempDir() + "gpipe_schedule_file_test.yaml";
  {
    std::ofstream out(path);
    write_schedule(out, dualpipe_v(2, 4, Remat::Never), "dualpipe_v");
  }
  Deck deck;
  deck.training.micro_batches = 4;
  deck.pipeline.schedule_file = path;
  const Schedule s = deck_schedule(deck, 2);
  EXPECT_EQ(s.ops, dualpipe_v(2, 4, Remat::Never).ops);
  try {
    deck_schedule(deck, 4);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": pipeline.schedule_file: the schedule is for 2 ranks and 4 "
                                            "micro-batches, the run has K = 4 and training.micro_batches = 4");
  }
  deck.pipeline.schedule_file.clear();
  deck.pipeline.schedule = ScheduleKind::ZbV;
  EXPECT_EQ(deck_schedule(deck, 2).ops, zb_v(2, 4, Remat::Never).ops);
  std::remove(path.c_str());
}

// Per-stage buffer plans of a V schedule: the plan of each stage's own ops,
// indices into its rank's list; zb_v holds at most 2K stage micro-batches per
// rank (1F1B's K micro-batches of a rank's layers).
TEST(ScheduleMemory, StagePlansOfTheV) {
  const Schedule s = zb_v(2, 4, Remat::Never);
  // ZB-V's order (ScheduleV.ZbVOpLists): rank 0 (stages 0, 3) allocates 4 +
  // 1 (F3@0 runs before W0@0), rank 1 (stages 1, 2) 3 + 2 stage
  // micro-batches: separate pools per stage, above the joint peak of 4.
  EXPECT_EQ(stage_slots(s), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(peak_held(s, 0), 4);
  EXPECT_EQ(peak_held(s, 1), 4);
  const CellBufferPlan p = plan_buffers(s, 3);  // rank 0's second stage
  EXPECT_EQ(s.ops[0][size_t(p.micro_batch.first[0])], (Op{OpKind::Forward, 0, 3}));
  EXPECT_EQ(s.ops[0][size_t(p.micro_batch.last[0])], (Op{OpKind::BackwardWeights, 0, 3}));
  for (int K = 1; K <= 8; ++K)
    for (const int M : {K, 2 * K, 3 * K}) {
      const Schedule v = zb_v(K, M, Remat::Never);
      for (int r = 0; r < K; ++r) EXPECT_LE(peak_held(v, r), 2 * K) << "K=" << K << " M=" << M;
      EXPECT_EQ(peak_held(one_f_one_b(K, M, Remat::Never), 0), std::min(M, K));
    }
  // The one planner on a stage map: plan_buffers(schedule, stage) equals
  // the plan of the stage's ops alone (a one-cell schedule of them) with
  // every op index mapped back into the rank's list (zb_v, dualpipe_v, and
  // zb_v with grouped W).
  for (int K = 1; K <= 4; ++K)
    for (const Schedule& v : {zb_v(K, 2 * K, Remat::Never), dualpipe_v(K, 2 * K, Remat::Always),
                              group_weights(zb_v(K, 3 * K, Remat::Never), 2)})
      for (int st = 0; st < v.stages; ++st) {
        const int r = v.rank_of_stage[size_t(st)];
        Schedule one;
        one.cells = one.stages = 1;
        one.micro_batches = v.micro_batches;
        one.rank_of_stage = {0};
        one.rematerialized = v.rematerialized;
        one.ops.resize(1);
        std::vector<int> position;
        for (int i = 0; i < int(v.ops[size_t(r)].size()); ++i)
          if (v.ops[size_t(r)][size_t(i)].stage == st) {
            Op op = v.ops[size_t(r)][size_t(i)];
            op.stage = 0;
            one.ops[0].push_back(op);
            position.push_back(i);
          }
        CellBufferPlan alone = plan_buffers(one, 0);
        for (BufferPool* pool : {&alone.micro_batch, &alone.activations, &alone.input_grad, &alone.weight_grad})
          for (auto* list : {&pool->first, &pool->last, &pool->free_after})
            for (int& i : *list)
              if (i >= 0) i = position[size_t(i)];
        const CellBufferPlan mapped = plan_buffers(v, st);
        const auto same = [](const BufferPool& a, const BufferPool& b) {
          return a.slots == b.slots && a.slot == b.slot && a.first == b.first && a.last == b.last &&
                 a.free_after == b.free_after;
        };
        EXPECT_TRUE(same(alone.micro_batch, mapped.micro_batch)) << "K=" << K << " stage " << st;
        EXPECT_TRUE(same(alone.activations, mapped.activations)) << "K=" << K << " stage " << st;
        EXPECT_TRUE(same(alone.input_grad, mapped.input_grad)) << "K=" << K << " stage " << st;
        EXPECT_TRUE(same(alone.weight_grad, mapped.weight_grad)) << "K=" << K << " stage " << st;
        EXPECT_EQ(alone.forward_slot, mapped.forward_slot);
        EXPECT_EQ(alone.weight_group, mapped.weight_group);
      }
  try {
    plan_buffers(zb_v(2, 4, Remat::Never), 4);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "schedule: stage 4 outside 0..3");
  }
}

// 8 synthetic layers, F = I = W = 10 us per sample, N = 64 in M = 8
// micro-batches of 8 rows, no communication or optimizer cost, K = 2 ranks.
Deck synthetic_deck(const std::string& schedule) {
  std::string layers;
  for (int l = 0; l < 8; ++l) layers += "    - {type: synthetic, units: 8, forward_us: 10, params: 100}\n";
  return parse_deck("model:\n  input: 8\n  layers:\n" + layers +
                        "data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}\n"
                        "training: {epochs: 1, batch_size: 64, micro_batches: 8}\n"
                        "pipeline: {schedule: " +
                        schedule + "}\n",
                    "deck.yaml");
}

PredictOptions exact_options(const Deck& deck) {
  PredictOptions options;
  options.costs.synthetic = synthetic_layers(deck);
  options.network.p2p = options.network.allreduce = LinkModel{};
  options.optimizer_bytes_per_s = 1e300;
  return options;
}

TEST(PredictV, SyntheticDeckIsExact) {
  // zb_v and dualpipe_v: 4 stages of 2 layers, 160 us per op; the step is
  // 6M + K - 1 = 49 ops (idle (K-1)/(6M+K-1) = 1/49). zero_bubble: 2 cells
  // of 4 layers, 320 us per op, 3M + K - 1 = 25 ops.
  for (const std::string name : {"zb_v", "dualpipe_v"}) {
    const Deck deck = synthetic_deck(name);
    const Prediction p = predict(deck, 2, exact_options(deck));
    EXPECT_NEAR(p.step_time_s, 49 * 160e-6, 1e-15) << name;
    EXPECT_NEAR(p.bubble_fraction, 1.0 / 49, 1e-12) << name;
    EXPECT_NEAR(p.bubble_analytical, 1.0 / 49, 1e-12) << name;
    EXPECT_EQ(p.cells_detail[0].parameter_bytes, 4 * 400);
  }
  const Deck zb = synthetic_deck("zero_bubble");
  EXPECT_NEAR(predict(zb, 2, exact_options(zb)).step_time_s, 25 * 320e-6, 1e-15);
}

// pipeline.wait: sleep prices a waiting rank's poll: every point-to-point
// message arrives wait_hop_s later (kWaitSleepHopS by default), exactly as a
// link latency of that much under spin; the step grows by the hops on its
// critical path, and a zero hop is spin's step.
TEST(PredictV, SleepingWaitsAddAHopDelayPerMessage) {
  for (const std::string name : {"1f1b", "zb_v"}) {
    const Deck spin = synthetic_deck(name), sleep = synthetic_deck(name + ", wait: sleep");
    ASSERT_TRUE(sleep.pipeline.wait_sleep);
    PredictOptions options = exact_options(spin), linked = options;
    linked.network.p2p.latency_s = kWaitSleepHopS;
    const double base = predict(spin, 2, options).step_time_s;
    EXPECT_DOUBLE_EQ(predict(sleep, 2, options).step_time_s, predict(spin, 2, linked).step_time_s) << name;
    options.wait_hop_s = linked.network.p2p.latency_s = 1e-3;
    EXPECT_DOUBLE_EQ(predict(sleep, 2, options).step_time_s, predict(spin, 2, linked).step_time_s) << name;
    EXPECT_GT(predict(sleep, 2, options).step_time_s, base + 1e-3) << name;  // at least one hop on its path
    options.wait_hop_s = 0;
    EXPECT_DOUBLE_EQ(predict(sleep, 2, options).step_time_s, base) << name;
  }
}

TEST(Tune, BeatsOrEqualsZbH1WithinTheLimit) {
  for (const std::string weights : {"10", "4", "30"}) {
    // F 10, I 10, W `weights` us per sample: ZB-H1's lag of k micro-batches
    // fits only W = F = I.
    std::string layers;
    for (int l = 0; l < 8; ++l)
      layers += "    - {type: synthetic, units: 8, forward_us: 10, params: 100, backward_weights_us: " + weights + "}\n";
    const Deck deck = parse_deck("model:\n  input: 8\n  layers:\n" + layers +
                                     "data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}\n"
                                     "training: {epochs: 1, batch_size: 64, micro_batches: 8}\n"
                                     "pipeline: {schedule: zero_bubble}\n",
                                 "deck.yaml");
    const TuneResult t = tune(deck, 4, exact_options(deck), 4);
    ASSERT_GE(t.best, 0);
    const TuneCandidate& best = t.candidates[size_t(t.best)];
    EXPECT_EQ(t.candidates.front().name, "zero_bubble (ZB-H1)");
    EXPECT_LE(best.step_s, t.zb_h1_step_s) << weights;
    // ZB-H1's fixed W lag fits W = F = I only; the V greedy beats it here.
    EXPECT_LT(best.step_s, t.zb_h1_step_s * 0.99) << weights;
    EXPECT_NE(best.name, "zero_bubble (ZB-H1)") << weights;
    for (const auto& c : t.candidates) {
      EXPECT_NO_THROW(check_schedule(c.schedule)) << c.name;
      if (!c.fits) continue;
      // Equal layers: a rank's two V stages keep what its one cell keeps.
      EXPECT_EQ(c.limit_bytes, t.limit_bytes) << c.name;
      const StepInput in = step_input(deck, 4, exact_options(deck), c.schedule);
      for (int r = 0; r < 4; ++r)
        EXPECT_LE(peak_activation_bytes(c.schedule, in.activation_bytes, r), c.limit_bytes[size_t(r)]) << c.name;
    }
  }
}

// pipeline.w_group applies to --tune's candidates as to the deck's own
// schedule (it was ignored: every candidate ran one W per micro-batch):
// each candidate is the ungrouped one grouped by group_weights, simulated
// with the grouped list's pricing; the same for --tune-trace's times.
TEST(Tune, HonoursWGroup) {
  std::string layers;
  for (int l = 0; l < 8; ++l)
    layers += "    - {type: synthetic, units: 8, forward_us: 10, params: 100, backward_weights_us: 4}\n";
  const std::string text = "model:\n  input: 8\n  layers:\n" + layers +
                           "data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}\n"
                           "training: {epochs: 1, batch_size: 64, micro_batches: 8}\n"
                           "pipeline: {schedule: zero_bubble}\n";
  const Deck plain = parse_deck(text, "deck.yaml"), grouped = parse_deck(text, "deck.yaml", {"pipeline.w_group=2"});
  const TuneResult a = tune(plain, 4, exact_options(plain), 4), b = tune(grouped, 4, exact_options(grouped), 4);
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  EXPECT_GE(b.candidates.size(), 9u);  // ZB-H1, 4 greedy, zb_v, 4 greedy V
  for (size_t i = 0; i < a.candidates.size(); ++i) {
    const TuneCandidate &u = a.candidates[i], &g = b.candidates[i];
    EXPECT_EQ(g.name, u.name);
    EXPECT_EQ(g.schedule.ops, group_weights(u.schedule, 2).ops) << g.name;
    int counted = 0;
    for (const auto& ops : g.schedule.ops)
      for (const Op& op : ops) counted += op.kind == OpKind::BackwardWeights && op.count == 2;
    EXPECT_GT(counted, 0) << g.name;
    EXPECT_EQ(g.step_s, simulate_step(step_input(grouped, 4, exact_options(grouped), g.schedule)).makespan) << g.name;
    bool fits = true;
    for (int r = 0; r < 4; ++r)
      fits = fits && peak_activation_bytes(g.schedule, g.activation_bytes, r) <= g.limit_bytes[size_t(r)];
    EXPECT_EQ(g.fits, fits) << g.name;
  }
  EXPECT_EQ(b.zb_h1_step_s, b.candidates.front().step_s);
  EXPECT_EQ(tune_w_group_note(plain), "");
  EXPECT_EQ(tune_w_group_note(grouped),
            "pipeline.w_group = 2: every candidate's W ops are grouped 2 micro-batches at a time, as the deck's own "
            "schedule's would be (the written file holds the grouped W ops)");
  // Measured times: a grouped W lasts the sum of its micro-batches' W.
  TraceTimes times;
  times.cells = 2;
  times.micro_batches = 4;
  times.forward = {1.0, 2.0};
  times.backward_input = {2.0, 2.0};
  times.backward_weights = {0.5, 1.5};
  const TuneResult c = tune_times(times, 4, 2, 0.1), d = tune_times(times, 4, 2, 0.1, 4);
  ASSERT_EQ(c.candidates.size(), d.candidates.size());
  for (size_t i = 0; i < c.candidates.size(); ++i) {
    EXPECT_EQ(d.candidates[i].schedule.ops, group_weights(c.candidates[i].schedule, 4).ops) << d.candidates[i].name;
    for (const auto& ops : d.candidates[i].schedule.ops)
      for (const Op& op : ops)
        if (op.kind == OpKind::BackwardWeights) EXPECT_EQ(op.count, 4) << d.candidates[i].name;
  }
}

// Grouped W (pipeline.w_group) and fill_drain's whole-batch W are priced at
// their stacked rows: the Dense layers' W of a group over the group's rows
// (shared equally by its micro-batches, the op lasting their sum), G over
// the shard's rows with the B ops leaving those W out; W ops apart keep
// their own rows.
TEST(PredictV, GroupedAndWholeBatchWArePricedAtTheirStackedRows) {
  const Deck deck = parse_deck(R"(model:
  input: 16
  layers:
    - {type: dense, units: 32}
    - {type: relu}
    - {type: dense, units: 10}
data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}
training: {epochs: 1, batch_size: 16, micro_batches: 2}
pipeline: {balance: flops}
)",
                               "deck.yaml");
  PredictOptions options;
  options.costs.rate = RateCurve::parse("1:10,64:40", "--gflops");  // faster GEMMs at more rows
  const auto shapes = model_shapes(deck.model);
  const auto sum = [&](std::int64_t rows, double LayerSeconds::*part, bool split_only) {
    double t = 0;
    for (const auto& l : shapes)
      if (!split_only || (l.entry && l.entry->splits_backward)) t += options.costs.seconds(l, rows).*part;
    return t;
  };
  const auto w_at = [&](std::int64_t rows) { return sum(rows, &LayerSeconds::backward_weights, true); };
  EXPECT_LT(w_at(16), 2 * w_at(8));
  // zero_bubble F0 I0 W0 F1 I1 W1, grouped by 2: F0 I0 F1 I1 W(0..1).
  const Schedule grouped = group_weights(zero_bubble(1, 2, Remat::Never), 2);
  ASSERT_EQ(grouped.ops[0].back(), (Op{OpKind::BackwardWeights, 0, 0, 2}));
  const StepInput g = step_input(deck, 1, options, grouped);
  EXPECT_NEAR(g.seconds[0][0].backward_weights, w_at(16) / 2, 1e-18);
  EXPECT_NEAR(g.seconds[0][1].backward_weights, w_at(16) / 2, 1e-18);
  const StepTiming gt = simulate_step(g);
  EXPECT_NEAR(gt.cells[0].ops[4].end - gt.cells[0].ops[4].start, w_at(16), 1e-15);
  const StepInput apart = step_input(deck, 1, options, zero_bubble(1, 2, Remat::Never));
  EXPECT_NEAR(apart.seconds[0][0].backward_weights, w_at(8), 1e-18);
  // fill_drain F0 F1 B1 B0 G: G is the W at 16 rows, each B the rest of the backward at 8.
  const StepInput fd = step_input(deck, 1, options, fill_drain(1, 2, Remat::Never));
  EXPECT_NEAR(fd.seconds[0][0].batch_weights, w_at(16), 1e-18);
  const double all_b = sum(8, &LayerSeconds::backward_input, false) + sum(8, &LayerSeconds::backward_weights, false);
  EXPECT_NEAR(fd.seconds[0][1].backward, all_b - w_at(8), 1e-18);
  const StepTiming ft = simulate_step(fd);
  EXPECT_NEAR(ft.cells[0].ops[4].end - ft.cells[0].ops[4].start, w_at(16), 1e-15);
}

// --tune --tune-trace: the medians of a trace's F, I, W events per cell (the
// first traced step, the warm-up, left out), then the tuned schedule.
TEST(Tune, FromTraceTimes) {
  TraceHeader header;
  header.ranks = header.cells = 2;
  header.micro_batches = 4;
  header.schedule = "zero_bubble";
  GatheredTrace trace;
  trace.events.resize(2);
  trace.steps.resize(2);
  for (int r = 0; r < 2; ++r) {
    double t = 0;
    const auto add = [&](std::int64_t step, EventKind kind, double seconds) {
      trace.events[size_t(r)].push_back({step, std::int8_t(kind), 0, t, t + seconds, 0});
      t += seconds;
    };
    add(0, EventKind::Forward, 9.0);  // the warm-up step: left out
    for (const double f : {1.0, 3.0, 2.0, 2.0}) add(1, EventKind::Forward, f * (r + 1));
    for (const double i : {4.0, 4.0}) add(1, EventKind::BackwardInput, i);
    for (int m = 0; m < 4; ++m) add(1, EventKind::BackwardWeights, 0.5 + r);
    for (std::int64_t step : {0, 1}) {
      StepSummary st;
      st.step = step;
      trace.steps[size_t(r)].push_back(st);
    }
  }
  const std::string path = ::testing::TempDir() + "gpipe_tune_trace_test.h5";
  write_trace_file(path, header, trace);
  const TraceTimes times = read_trace_times(path);
  std::remove(path.c_str());
  EXPECT_EQ(times.cells, 2);
  EXPECT_EQ(times.micro_batches, 4);
  EXPECT_EQ(times.schedule, "zero_bubble");
  EXPECT_EQ(times.forward, (std::vector<double>{2.0, 4.0}));
  EXPECT_EQ(times.backward_input, (std::vector<double>{4.0, 4.0}));
  EXPECT_EQ(times.backward_weights, (std::vector<double>{0.5, 1.5}));
  const TuneResult t = tune_times(times, 8, 2, 0.1);
  ASSERT_GE(t.best, 0);
  EXPECT_LE(t.candidates[size_t(t.best)].step_s, t.zb_h1_step_s);
  for (const auto& c : t.candidates) {
    EXPECT_NO_THROW(check_schedule(c.schedule)) << c.name;
    if (c.fits)
      for (int r = 0; r < 2; ++r) EXPECT_LE(peak_activation_bytes(c.schedule, c.activation_bytes, r), 2) << c.name;
  }
  try {
    read_trace_times("/nonexistent/t.h5");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/t.h5: cannot open the trace (not an HDF5 file, or missing)");
  }
}

// A W event covering several micro-batches (grouped W, pipeline.w_group = 2
// or 4; fill_drain's whole-batch W, one per step) is read per micro-batch:
// its duration / the micro-batches it covers (the step's forwards / W events),
// so the tuner sees the same W as ungrouped ops of the same rate. M = 4, two
// traced steps (the first left out), per-micro-batch W of 0.5 (rank 0) and
// 1.5 (rank 1); w_group 3 groups unevenly (3 + 1): the step's mean.
TEST(Tune, FromTraceTimesGroupedW) {
  for (const int group : {1, 2, 3, 4}) {
    TraceHeader header;
    header.ranks = header.cells = 2;
    header.micro_batches = 4;
    header.schedule = "zero_bubble";
    GatheredTrace trace;
    trace.events.resize(2);
    trace.steps.resize(2);
    for (int r = 0; r < 2; ++r) {
      double t = 0;
      const auto add = [&](std::int64_t step, EventKind kind, std::int32_t m, double seconds) {
        trace.events[size_t(r)].push_back({step, std::int8_t(kind), m, t, t + seconds, 0});
        t += seconds;
      };
      for (std::int64_t step : {0, 1}) {
        const double w = step == 0 ? 7.0 : 0.5 + r;  // the warm-up's W: left out
        for (int m = 0; m < 4; ++m) add(step, EventKind::Forward, m, 1.0);
        for (int m = 0; m < 4; ++m) add(step, EventKind::BackwardInput, m, 2.0);
        for (int m = 0; m < 4; m += group) add(step, EventKind::BackwardWeights, m, w * std::min(group, 4 - m));
        StepSummary st;
        st.step = step;
        trace.steps[size_t(r)].push_back(st);
      }
    }
    const std::string path = ::testing::TempDir() + "gpipe_tune_trace_grouped_test.h5";
    write_trace_file(path, header, trace);
    const TraceTimes times = read_trace_times(path);
    std::remove(path.c_str());
    EXPECT_EQ(times.forward, (std::vector<double>{1.0, 1.0})) << group;
    EXPECT_EQ(times.backward_input, (std::vector<double>{2.0, 2.0})) << group;
    if (group == 3) {  // events of 3 w and 1 w, 2 W events for 4 forwards: x 1/2 -> 1.5 w and 0.5 w, median w
      EXPECT_DOUBLE_EQ(times.backward_weights[0], 0.5) << group;
      EXPECT_DOUBLE_EQ(times.backward_weights[1], 1.5) << group;
    } else {
      EXPECT_EQ(times.backward_weights, (std::vector<double>{0.5, 1.5})) << group;
    }
  }
}

}  // namespace
}  // namespace gpipe

// The performance model (predict/): the step simulator against the bubble
// formulas and hand-computed timelines, the cost sources, and predict() on a
// deck against the library's own buffer-plan accounting.

#include <gtest/gtest.h>

#include <limits>

#include <cstdio>
#include <stdexcept>

#include "gpipe/core/error.hpp"
#include "gpipe/io/costs_file.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/predict/predict.hpp"
#include "gpipe/predict/simulate.hpp"
#include "gpipe/predict/sweep.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

// A step of `kind` where every cell's ops of every micro-batch take `t`, no
// communication cost.
StepInput uniform(ScheduleKind kind, int K, int M, OpSeconds t) {
  StepInput in;
  in.schedule = make_schedule(kind, K, M, Remat::Never);
  in.seconds.assign(size_t(K), std::vector<OpSeconds>(size_t(M), t));
  in.boundary_bytes.assign(size_t(K - 1), std::vector<std::int64_t>(size_t(M), 1024));
  return in;
}

OpSeconds fused(double f, double b) {
  OpSeconds t;
  t.forward = t.recompute = f;
  t.backward = b;
  return t;
}

TEST(Simulate, FillDrainBubbleIsExactlyTheFormula) {
  for (const int K : {1, 2, 3, 4, 8, 16})
    for (const int M : {1, 2, 4, 7, 16, 64})
      for (const double b : {1.0, 2.0}) {
        const StepTiming t = simulate_step(uniform(ScheduleKind::FillDrain, K, M, fused(1, b)));
        // Forwards reach the last cell after K-1 steps of 1, backwards come
        // back in K-1 steps of b: (M + K - 1) (1 + b).
        EXPECT_DOUBLE_EQ(t.makespan, (M + K - 1) * (1 + b)) << K << " " << M;
        EXPECT_DOUBLE_EQ(t.bubble_fraction, double(K - 1) / double(M + K - 1)) << K << " " << M;
        EXPECT_DOUBLE_EQ(t.bubble_fraction, bubble_fraction(ScheduleKind::FillDrain, K, M));
      }
}

TEST(Simulate, OneFOneBHasTheSameBubbleAndItsMemoryBound) {
  for (const int K : {2, 3, 4, 8})
    for (const int M : {1, 2, 4, 8, 13}) {
      const StepInput in = uniform(ScheduleKind::OneFOneB, K, M, fused(1, 1));
      const StepTiming t = simulate_step(in);
      EXPECT_DOUBLE_EQ(t.bubble_fraction, double(K - 1) / double(M + K - 1)) << K << " " << M;
      for (int k = 0; k < K; ++k) {
        // Micro-batches in flight (F run, B not yet) at any simulated time:
        // the peak is min(M, K - k), and it is the buffer plan's slot count.
        int live = 0, peak = 0;
        for (const Op& op : in.schedule.ops[size_t(k)]) {
          live += op.kind == OpKind::Forward ? 1 : op.kind == OpKind::Backward ? -1 : 0;
          peak = std::max(peak, live);
        }
        EXPECT_EQ(peak, std::min(M, K - k));
        EXPECT_EQ(plan_buffers(in.schedule, k).micro_batch.slots, std::min(M, K - k));
        // The simulated timeline runs the cell's ops in list order, back to back or later.
        for (size_t i = 1; i < t.cells[size_t(k)].ops.size(); ++i)
          EXPECT_GE(t.cells[size_t(k)].ops[i].start, t.cells[size_t(k)].ops[i - 1].end);
      }
    }
}

TEST(Simulate, ZeroBubbleIdleWithEqualFBW) {
  OpSeconds t;
  t.forward = t.backward_input = t.backward_weights = 1;
  for (const int K : {2, 3, 4, 8})
    for (const int M : {K, 2 * K, 4 * K}) {
      const StepTiming s = simulate_step(uniform(ScheduleKind::ZeroBubble, K, M, t));
      EXPECT_DOUBLE_EQ(s.bubble_fraction, double(K - 1) / double(3 * M + K - 1)) << K << " " << M;
      EXPECT_DOUBLE_EQ(s.makespan, 3 * M + K - 1);
    }
}

TEST(Simulate, HandComputedImbalancedFillDrain) {
  // K = 2, M = 2; cell 0: F = 1, B = 2; cell 1 (twice as slow): F = 2, B = 4; no communication cost.
  //   cell 0: F0 [0,1]  F1 [1,2]                                  B1 [9,11]   B0 [13,15]
  //   cell 1:           F0 [1,3]  F1 [3,5]  B1 [5,9]  B0 [9,13]
  // makespan 15; busy 6 and 12; idle 9 + 3 = 12 of 2 x 15: bubble 0.4.
  StepInput in = uniform(ScheduleKind::FillDrain, 2, 2, fused(1, 2));
  in.seconds[1].assign(2, fused(2, 4));
  const StepTiming t = simulate_step(in);
  EXPECT_DOUBLE_EQ(t.makespan, 15);
  EXPECT_DOUBLE_EQ(t.cells[0].busy, 6);
  EXPECT_DOUBLE_EQ(t.cells[1].busy, 12);
  EXPECT_DOUBLE_EQ(t.cells[0].ops[2].start, 9);   // B1 waits for cell 1's B1
  EXPECT_DOUBLE_EQ(t.cells[0].ops[3].start, 13);  // B0 waits for cell 1's B0
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 0.4);
}

TEST(Simulate, HandComputedImbalancedOneFOneB) {
  // K = 2, M = 3, 1F1B; cell 0: F = B = 1; cell 1: F = B = 2.
  // Op lists: cell 0 F0 F1 B0 F2 B1 B2; cell 1 F0 B0 F1 B1 F2 B2.
  //   cell 0: F0 [0,1] F1 [1,2]          B0 [5,6] F2 [6,7]       B1 [9,10]         B2 [13,14]
  //   cell 1:          F0 [1,3] B0 [3,5] F1 [5,7] B1 [7,9]  F2 [9,11] B2 [11,13]
  // makespan 14; busy 6 and 12; bubble (8 + 2) / 28.
  StepInput in = uniform(ScheduleKind::OneFOneB, 2, 3, fused(1, 1));
  in.seconds[1].assign(3, fused(2, 2));
  const StepTiming t = simulate_step(in);
  EXPECT_DOUBLE_EQ(t.makespan, 14);
  EXPECT_DOUBLE_EQ(t.cells[0].ops[2].start, 5);
  EXPECT_DOUBLE_EQ(t.cells[1].ops[4].start, 9);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 10.0 / 28.0);
}

TEST(Simulate, LinkLatencyBandwidthAndWireOrder) {
  // K = 2, M = 2, F = B = 1; 2000-byte messages on a 1000 B/s wire with
  // 0.5 s latency (each message occupies its direction's wire 2 s):
  //   F0 ends 1: wire [1,3], arrives 3.5; F1 ends 2: waits for the wire, [3,5], arrives 5.5.
  //   cell 1: F0 [3.5,4.5] F1 [5.5,6.5] B1 [6.5,7.5] B0 [7.5,8.5]
  //   B1's gradient: wire [7.5,9.5], arrives 10; B0's: [9.5,11.5], arrives 12.
  //   cell 0: B1 [10,11] B0 [12,13]; makespan 13.
  StepInput in = uniform(ScheduleKind::FillDrain, 2, 2, fused(1, 1));
  in.boundary_bytes[0] = {2000, 2000};
  in.link.latency_s = 0.5;
  in.link.bytes_per_s = 1000;
  const StepTiming t = simulate_step(in);
  EXPECT_DOUBLE_EQ(t.cells[1].ops[1].start, 5.5);
  EXPECT_DOUBLE_EQ(t.cells[0].ops[2].start, 10);
  EXPECT_DOUBLE_EQ(t.makespan, 13);
}

TEST(Simulate, AllReduceBucketsSerializeAfterTheyAreFinal) {
  // K = 1, M = 1, D = 2: F [0,1], B [1,3]. Ring all-reduce of 1000 bytes on
  // 1000 B/s, no latency: 2 (D-1)/D x 1 s = 1 s per bucket. Bucket a final
  // 0.5 s into B (1.5): [1.5,2.5]; bucket b final at B's end (3): [3,4].
  // Exposed reduction 1 s; optimizer 0.5 s: the step ends at 4.5 with 4 s busy.
  StepInput in = uniform(ScheduleKind::FillDrain, 1, 1, fused(1, 2));
  in.replicas = 2;
  in.allreduce.bytes_per_s = 1000;
  in.buckets = {{{1000, 1, 0.5}, {1000, 1, 2.0}}};
  in.optimizer_s = {0.5};
  const StepTiming t = simulate_step(in);
  EXPECT_DOUBLE_EQ(t.cells[0].reduce_end, 4);
  EXPECT_DOUBLE_EQ(t.cells[0].reduce_exposed, 1);
  EXPECT_DOUBLE_EQ(t.makespan, 4.5);
  EXPECT_DOUBLE_EQ(t.cells[0].busy, 3.5);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 0);
}

TEST(Simulate, DeadlockingListsAreAnError) {
  StepInput in = uniform(ScheduleKind::FillDrain, 2, 1, fused(1, 1));
  in.schedule.ops[0] = {{OpKind::Backward, 0}, {OpKind::Forward, 0}};
  try {
    simulate_step(in);
    FAIL() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "simulate_step: the schedule deadlocks: cell 0 waits forever at B(0)");
  }
}

TEST(Costs, RateCurveInterpolatesInLogRows) {
  const RateCurve c = RateCurve::parse("32:38,256:80", "--gflops");
  EXPECT_DOUBLE_EQ(c.gflops(32), 38);
  EXPECT_DOUBLE_EQ(c.gflops(8), 38);
  EXPECT_DOUBLE_EQ(c.gflops(256), 80);
  EXPECT_DOUBLE_EQ(c.gflops(1024), 80);
  EXPECT_DOUBLE_EQ(c.gflops(64), 38 + 14);  // one third of the way in log2
  EXPECT_EQ(c.str(), "32:38,256:80");
  EXPECT_DOUBLE_EQ(RateCurve::parse("50", "--gflops").gflops(7), 50);
  try {
    RateCurve::parse("256:80,32:38", "--gflops");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "--gflops: expected a GFLOP/s number > 0 or ROWS:GFLOPS,... with rows ascending and "
                 "both > 0, got '256:80,32:38'");
  }
}

TEST(Costs, FlopsSplitAndSyntheticKeys) {
  const LayerShape dense = layer_shape(parse_layer("{type: dense, units: 4}"), Shape{3}, 1);
  CostSource costs;
  costs.rate = RateCurve::parse("1e-9", "rate");  // 1 FLOP/s: seconds = FLOPs
  const LayerSeconds s = costs.seconds(dense, 2);
  // Dense, n = 2, 3 -> 4 (LayerEntry::flops: 4 n in out + 2 n out = 112
  // without the input gradient, 6 n in out + 2 n out = 160 with it):
  // forward = 160 / 3, weights = 112 - 160 / 3, input gradient 160 - 112 = 48.
  EXPECT_DOUBLE_EQ(s.forward, 160.0 / 3);
  EXPECT_DOUBLE_EQ(s.backward_weights, 112 - 160.0 / 3);
  EXPECT_DOUBLE_EQ(s.backward_input, 48);
  EXPECT_EQ(costs.origin(dense, 2), "flops");
  // The model's first layer computes no input gradient; its forward is the same.
  const LayerSeconds first = costs.seconds(layer_shape(parse_layer("{type: dense, units: 4}"), Shape{3}, 0), 2);
  EXPECT_DOUBLE_EQ(first.backward_input, 0);
  EXPECT_DOUBLE_EQ(first.forward, 160.0 / 3);
  costs.synthetic.resize(2);
  costs.synthetic[1] = SyntheticKeys{100, 50, 25, 0};
  const LayerSeconds y = costs.seconds(dense, 8);  // 8 rows x microseconds per sample
  EXPECT_DOUBLE_EQ(y.forward, 800e-6);
  EXPECT_DOUBLE_EQ(y.backward_input, 400e-6);
  EXPECT_DOUBLE_EQ(y.backward_weights, 200e-6);
  EXPECT_EQ(costs.origin(dense, 8), "synthetic");
  costs.synthetic[1].reset();
  costs.measured[{1, 8}] = {1, 2, 3};
  EXPECT_DOUBLE_EQ(costs.seconds(dense, 8).backward_input, 2);
  EXPECT_EQ(costs.origin(dense, 8), "measured");
}

const char* kDeck = R"(seed: 3
model:
  input: 16
  layers:
    - {type: dense, units: 32}
    - {type: relu}
    - {type: dense, units: 32}
    - {type: relu}
    - {type: dense, units: 32}
    - {type: relu}
    - {type: dense, units: 10}
data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}
training: {epochs: 1, batch_size: 64, micro_batches: 8}
optimizer: {type: adam, lr: 0.001}
pipeline: {balance: flops, schedule: 1f1b}
)";

TEST(Predict, UsesTheLibrarysAccountingAndCountsTraffic) {
  const Deck deck = parse_deck(kDeck, "deck.yaml", {"parallel.cells=4"});
  PredictOptions options;
  options.network = network_preset("hdr200");
  const Prediction p = predict(deck, 8, options);
  const RunPlan plan = plan_run(deck, 8);
  ASSERT_EQ(p.cells, 4);
  EXPECT_EQ(p.replicas, 2);
  EXPECT_EQ(p.micro_batch_rows, 4);  // 64 / 2 replicas / 8
  std::int64_t params = 0;
  for (int k = 0; k < 4; ++k) {
    const auto& c = p.cells_detail[size_t(k)];
    EXPECT_EQ(c.activation_bytes, plan.activation_bytes[size_t(k)]);
    EXPECT_EQ(c.peak_micro_batches, std::min(8, 4 - k));
    EXPECT_EQ(c.memory_bytes, plan.memory[size_t(k)].total());  // the memory model (tests/mpi/test_memory.cpp)
    // Parameters, gradients and Adam's two moments among its terms.
    EXPECT_EQ(plan.memory[size_t(k)].parameters + plan.memory[size_t(k)].gradients + plan.memory[size_t(k)].optimizer,
              4 * c.parameter_bytes);
    params += c.parameter_bytes;
  }
  EXPECT_EQ(params, 4 * (16 * 32 + 32 + 2 * (32 * 32 + 32) + 32 * 10 + 10));
  // Every boundary carries each of the 64 samples' activation and gradient.
  std::int64_t pipeline = 0;
  for (int k = 0; k + 1 < 4; ++k) {
    const auto& c = p.cells_detail[size_t(k)];
    pipeline += 2 * 64 * (c.first_layer + c.layers - 1 == 6 ? 10 : 32) * 4;
  }
  EXPECT_EQ(p.pipeline_bytes, pipeline);
  EXPECT_EQ(p.allreduce_bytes, 2 * params);  // ring: 2 (D-1) x each cell's gradients
  EXPECT_EQ(p.comm_bytes, p.pipeline_bytes + p.allreduce_bytes);
  EXPECT_DOUBLE_EQ(p.samples_per_s, 64 / p.step_time_s);
  EXPECT_GT(p.bubble_fraction, 0);
  // Adam: 7 float arrays per parameter at this machine's measured 5 GB/s.
  const StepInput in = step_input(deck, 8, options);
  EXPECT_DOUBLE_EQ(in.optimizer_s[3], double(p.cells_detail[3].parameter_bytes * 7) / 5e9);
  EXPECT_EQ(in.buckets.size(), 4u);  // D = 2: one bucket list per cell
}

TEST(Predict, SweepCoversValidGridsAndPicksTheFastestThatFits) {
  const Deck deck = parse_deck(kDeck, "deck.yaml");
  PredictOptions options;
  const SweepResult s = sweep(deck, 4, options, 0);
  // K = 1 (D = 4, shard 16: M = 1..16), K = 2 (shard 32: M = 1..32), K = 4 (M = 1..64); x 3 schedules.
  EXPECT_EQ(s.rows.size(), size_t(3 * (5 + 6 + 7)));
  ASSERT_GE(s.best, 0);
  for (const auto& r : s.rows) EXPECT_LE(r.prediction.samples_per_s, s.rows[size_t(s.best)].prediction.samples_per_s);
  const SweepResult none = sweep(deck, 4, options, 1);
  EXPECT_EQ(none.best, -1);
}

TEST(Predict, SyntheticDeckIsExact) {
  // 4 synthetic layers of 10 us per sample for F, I and W; N = 64 in M = 8
  // micro-batches of 8 rows on K = 4 cells, no communication cost, an
  // optimizer of no cost: each cell runs F = 80 us and B = 160 us per
  // micro-batch, so the step is (M + K - 1) x 240 us = 2.64 ms.
  const Deck deck = parse_deck(R"(model:
  input: 4
  layers:
    - {type: synthetic, units: 8, forward_us: 10, params: 100}
    - {type: synthetic, units: 8, forward_us: 10, backward_input_us: 10, backward_weights_us: 10}
    - {type: synthetic, units: 8, forward_us: 10}
    - {type: synthetic, units: 2, forward_us: 10}
data: {train_images: ti, train_labels: tl, test_images: si, test_labels: sl}
training: {epochs: 1, batch_size: 64, micro_batches: 8}
pipeline: {balance: [1, 1, 1, 1]}
)",
                               "deck.yaml");
  const auto keys = synthetic_layers(deck);
  ASSERT_EQ(keys.size(), 4u);
  ASSERT_TRUE(keys[0]);
  EXPECT_EQ(keys[0]->backward_weights_us, 10);  // defaults to forward_us
  EXPECT_EQ(keys[0]->params, 100);
  PredictOptions options;
  options.costs.synthetic = keys;
  options.network.p2p = options.network.allreduce = LinkModel{};
  options.optimizer_bytes_per_s = 1e300;
  const Prediction p = predict(deck, 4, options);
  EXPECT_NEAR(p.step_time_s, 11 * 240e-6, 1e-15);
  EXPECT_NEAR(p.bubble_fraction, 3.0 / 11.0, 1e-12);
  EXPECT_NEAR(p.cells_detail[2].busy_s, 8 * 240e-6, 1e-15);
  EXPECT_EQ(p.cells_detail[0].parameter_bytes, 400);
}

TEST(Costs, CalibrationFileRoundTripAndInterpolation) {
  const Deck deck = parse_deck(kDeck, "deck.yaml");
  CostsTable t;
  t.deck = "deck.yaml";
  t.precision = "float";
  t.build = "test";
  for (const auto& layer : deck.model.layers) t.layer_types.push_back(layer.type);
  t.rows = {{2, 4, 1.0, 2.0, 3.0}, {2, 8, 3.0, 4.0, 5.0}};
  const std::string path = ::testing::TempDir() + "gpipe_costs_test.h5";
  write_costs_file(path, t);
  const CostsTable back = read_costs_file(path);
  EXPECT_EQ(back.layer_types, t.layer_types);
  ASSERT_EQ(back.rows.size(), 2u);
  EXPECT_EQ(back.rows[1].rows, 8);
  EXPECT_EQ(back.rows[1].backward_weights_s, 5.0);
  CostSource costs;
  costs.measured = measured_costs(back, deck, path);
  const auto shapes = model_shapes(deck.model);
  EXPECT_EQ(costs.seconds(shapes[2], 8).forward, 3.0);                   // measured
  EXPECT_DOUBLE_EQ(costs.seconds(shapes[2], 6).backward_input, 3.0);     // halfway between 4 and 8 rows
  EXPECT_DOUBLE_EQ(costs.seconds(shapes[2], 16).backward_weights, 10.0);  // 5 s x 16 / 8 rows
  EXPECT_DOUBLE_EQ(costs.seconds(shapes[2], 2).forward, 0.5);             // 1 s x 2 / 4 rows
  EXPECT_EQ(costs.origin(shapes[0], 8), "flops");                        // layer 0 not measured
  std::remove(path.c_str());

  t.layer_types.pop_back();
  try {
    measured_costs(t, deck, "c.h5");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "c.h5: measured for another model (6 layers from deck.yaml), not deck.yaml's 7 layers");
  }
  try {
    read_costs_file(::testing::TempDir() + "no_such_costs.h5");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open (missing or not HDF5)"), std::string::npos);
  }
}

// A cost file whose times are not measured ones (NaN, infinite, negative)
// or whose rows name no layer: before, gpipe-plan predicted "step time nan s"
// (and --tune wrote a schedule from it) with exit status 0.
TEST(Costs, NonFiniteOrNegativeTimesInACostFileAreErrors) {
  const Deck deck = parse_deck(kDeck, "deck.yaml");
  const std::string path = ::testing::TempDir() + "gpipe_brk_costs_bad.h5";
  const auto error = [&](const CostsTable::Row& row) {
    CostsTable t;
    t.deck = "deck.yaml";
    t.precision = "float";
    t.build = "test";
    for (const auto& layer : deck.model.layers) t.layer_types.push_back(layer.type);
    t.rows = {{2, 4, 1.0, 2.0, 3.0}, row};
    write_costs_file(path, t);
    std::string message = "(no error)";
    try {
      read_costs_file(path);
    } catch (const InputError& e) {
      message = e.what();
    }
    std::remove(path.c_str());
    return message;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error({2, 8, nan, 4.0, 5.0}), path + ": row 1 (layer 2, 8 rows): forward_s = nan is not a measured time "
                                                "(expected a finite number of seconds >= 0)");
  EXPECT_EQ(error({2, 8, 3.0, 4.0, -5.0}), path + ": row 1 (layer 2, 8 rows): backward_weights_s = -5 is not a "
                                                  "measured time (expected a finite number of seconds >= 0)");
  EXPECT_EQ(error({7, 8, 3.0, 4.0, 5.0}),
            path + ": row 1 (layer 7, 8 rows): layer 7 outside 0..6 (layer_types lists 7 layers)");
  EXPECT_EQ(error({2, 0, 3.0, 4.0, 5.0}), path + ": row 1 (layer 2, 0 rows): rows 0, expected at least 1");
  EXPECT_EQ(error({2, 8, 3.0, 4.0, 5.0}), "(no error)");
}

TEST(Predict, UnknownLinkPreset) {
  try {
    network_preset("ethernet");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--link: expected one of shm, 10GbE, hdr200, got 'ethernet'");
  }
}

}  // namespace
}  // namespace gpipe

// Partitioning, micro-batch splitting and the fill-drain schedule.

#include <gtest/gtest.h>

#include "gpipe/core/error.hpp"
#include "gpipe/model/partition.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {
namespace {

TEST(Partition, MinMaxIsOptimal) {
  // Best split of (5, 1, 1, 1, 1, 5) into 3: (5) (1 1 1 1) (5), max 5.
  const Partition p = balance_min_max({5, 1, 1, 1, 1, 5}, 3);
  EXPECT_EQ(p.counts, (std::vector<int>{1, 4, 1}));
  EXPECT_EQ(p.first_layer(2), 5);
  EXPECT_EQ(p.cell_costs({5, 1, 1, 1, 1, 5}), (std::vector<double>{5, 4, 5}));
  EXPECT_DOUBLE_EQ(p.imbalance({5, 1, 1, 1, 1, 5}), 5.0 / (14.0 / 3.0));
  // Equal costs split evenly; one cell per layer when K = L.
  EXPECT_EQ(balance_min_max(std::vector<double>(8, 1.0), 4).counts, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(balance_min_max({3, 1, 2}, 3).counts, (std::vector<int>{1, 1, 1}));
  // Zero-cost layers still leave every cell non-empty.
  const auto z = balance_min_max({0, 0, 10, 0}, 3).counts;
  for (int c : z) EXPECT_GE(c, 1);
}

TEST(Partition, MoreCellsThanLayers) {
  try {
    balance_min_max({1, 2, 3}, 4);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "pipeline: 4 cells (MPI ranks) but the model has only 3 layers; every "
                           "cell needs at least one layer (run with at most 3 ranks)");
  }
}

TEST(Partition, ExplicitListErrors) {
  EXPECT_EQ(explicit_partition({2, 3}, 5, 2).counts, (std::vector<int>{2, 3}));
  auto error = [](std::vector<int> c, int L, int K) {
    try {
      explicit_partition(c, L, K);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({2, 2}, 5, 2), "pipeline.balance: the layer counts sum to 4 but the model has 5 layers");
  EXPECT_EQ(error({5, 0}, 5, 2), "pipeline.balance: cell 1 would be empty (0 layers); every cell "
                                 "needs at least one layer");
  EXPECT_EQ(error({5}, 5, 2), "pipeline.balance: the list has 1 entries but the pipeline has 2 "
                              "cells (MPI ranks); give one layer count per cell");
}

TEST(MicroBatch, UnevenSplitDiffersByAtMostOne) {
  const auto s = split_batch(30, 7);
  ASSERT_EQ(s.size(), 7u);
  const std::int64_t sizes[7] = {5, 5, 4, 4, 4, 4, 4};
  std::int64_t offset = 0;
  for (int m = 0; m < 7; ++m) {
    EXPECT_EQ(s[size_t(m)].size, sizes[m]);
    EXPECT_EQ(s[size_t(m)].offset, offset);
    offset += sizes[m];
  }
  EXPECT_EQ(split_batch(4, 4).back().size, 1);
  EXPECT_THROW(split_batch(3, 4), InputError);
  EXPECT_THROW(split_batch(3, 0), InputError);
}

TEST(MicroBatch, BubbleFormula) {
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 13), 3.0 / 16.0);
}

TEST(Schedule, FillDrain) {
  const Schedule s = fill_drain(2, 3, Remat::Never);
  const std::vector<Op> expected = {{OpKind::Forward, 0},  {OpKind::Forward, 1},
                                    {OpKind::Forward, 2},  {OpKind::Backward, 2},
                                    {OpKind::Backward, 1}, {OpKind::Backward, 0},
                                    {OpKind::BatchWeights, 0}};  // the whole-batch W (M > 1)
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(s.ops[0], expected);
  std::vector<Op> on_stage_1 = expected;
  for (auto& op : on_stage_1) op.stage = 1;  // rank 1 runs stage 1
  EXPECT_EQ(s.ops[1], on_stage_1);
  EXPECT_EQ(s.stages, 2);
  EXPECT_EQ(s.rank_of_stage, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.rematerialized, (std::vector<bool>{false, false, false}));
}

TEST(Schedule, RematerializationInsertsRecompute) {
  const Schedule a = fill_drain(1, 2, Remat::Always);
  EXPECT_EQ(a.ops[0], (std::vector<Op>{{OpKind::Forward, 0},
                                       {OpKind::Forward, 1},
                                       {OpKind::Recompute, 1},
                                       {OpKind::Backward, 1},
                                       {OpKind::Recompute, 0},
                                       {OpKind::Backward, 0},
                                       {OpKind::BatchWeights, 0}}));
  const Schedule e = fill_drain(1, 2, Remat::ExceptLast);
  EXPECT_EQ(e.rematerialized, (std::vector<bool>{true, false}));
  EXPECT_EQ(e.ops[0], (std::vector<Op>{{OpKind::Forward, 0},
                                       {OpKind::Forward, 1},
                                       {OpKind::Backward, 1},
                                       {OpKind::Recompute, 0},
                                       {OpKind::Backward, 0},
                                       {OpKind::BatchWeights, 0}}));
  EXPECT_THROW(parse_remat("sometimes", "pipeline.remat"), InputError);
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// Megatron-LM's interleaved 1F1B: with M = K every rank runs all its
// forwards (chunk by chunk, K micro-batches each), then the backwards with
// the chunks reversed; stage s on rank s mod K.
TEST(Schedule, InterleavedOneFOneB) {
  const Schedule s = interleaved_one_f_one_b(2, 2, 2, Remat::Never);
  EXPECT_EQ(s.stages, 4);
  EXPECT_EQ(s.rank_of_stage, (std::vector<int>{0, 1, 0, 1}));
  const auto on = [](int k) {
    return std::vector<Op>{{OpKind::Forward, 0, k},      {OpKind::Forward, 1, k},
                           {OpKind::Forward, 0, k + 2},  {OpKind::Forward, 1, k + 2},
                           {OpKind::Backward, 0, k + 2}, {OpKind::Backward, 1, k + 2},
                           {OpKind::Backward, 0, k},     {OpKind::Backward, 1, k}};
  };
  EXPECT_EQ(s.ops[0], on(0));
  EXPECT_EQ(s.ops[1], on(1));
  // M = 2K: rank 1's warm-up is (v - 1) K = 2 forwards, then F and B alternate.
  const Schedule t = interleaved_one_f_one_b(2, 2, 4, Remat::Always);
  const auto F = [](int m, int st) { return Op{OpKind::Forward, m, st}; };
  const auto R = [](int m, int st) { return Op{OpKind::Recompute, m, st}; };
  const auto B = [](int m, int st) { return Op{OpKind::Backward, m, st}; };
  EXPECT_EQ(t.ops[1], (std::vector<Op>{F(0, 1), F(1, 1), F(0, 3), R(0, 3), B(0, 3), F(1, 3), R(1, 3), B(1, 3),
                                       F(2, 1), R(0, 1), B(0, 1), F(3, 1), R(1, 1), B(1, 1), F(2, 3), R(2, 3),
                                       B(2, 3), F(3, 3), R(3, 3), B(3, 3), R(2, 1), B(2, 1), R(3, 1), B(3, 1)}));
  // Every stage runs F and B of every micro-batch once, its backwards in
  // micro-batch order (1f1b's gradient sum), for K = 1..4, v = 2, 3.
  for (int K = 1; K <= 4; ++K)
    for (int v = 2; v <= 3; ++v)
      for (int M = K; M <= 3 * K; M += K) {
        const Schedule x = interleaved_one_f_one_b(K, v, M, Remat::Never);
        for (int st = 0; st < K * v; ++st) {
          std::vector<int> forwards, backwards;
          for (const Op& op : x.ops[size_t(st % K)])
            if (op.stage == st) (op.kind == OpKind::Forward ? forwards : backwards).push_back(op.micro_batch);
          std::vector<int> in_order(static_cast<size_t>(M));
          for (int m = 0; m < M; ++m) in_order[size_t(m)] = m;
          EXPECT_EQ(forwards, in_order) << K << " " << v << " " << M << " stage " << st;
          EXPECT_EQ(backwards, in_order) << K << " " << v << " " << M << " stage " << st;
        }
      }
  EXPECT_EQ(interleaved_one_f_one_b(3, 1, 5, Remat::Never).ops, one_f_one_b(3, 5, Remat::Never).ops);
  EXPECT_DOUBLE_EQ(bubble_fraction(ScheduleKind::Interleaved1F1B, 4, 8, 2), 3.0 / 19.0);
  try {
    interleaved_one_f_one_b(2, 2, 3, Remat::Never);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "training.micro_batches: interleaved_1f1b with pipeline.chunks = 2 needs a multiple "
                           "of the 2 pipeline cells, not 3");
  }
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {
// A grouped W reads its micro-batches' rows in place exactly when they are
// one run of rows in the layer's slot allocation (docs/design.md, "Grouped W").
TEST(GroupedWRows, InPlaceOnlyForConsecutiveFullSlots) {
  const std::vector<MicroBatch> even = split_batch(32, 4);  // 8 rows each
  EXPECT_TRUE(slot_rows_stacked(even, {0, 1, 2, 3}, 0, 4, 8));
  EXPECT_TRUE(slot_rows_stacked(even, {4, 0, 1, 2}, 1, 3, 8));   // slots 0, 1, 2
  EXPECT_FALSE(slot_rows_stacked(even, {4, 0, 1, 2}, 0, 2, 8));  // slots 4, 0
  EXPECT_FALSE(slot_rows_stacked(even, {1, 0, 2, 3}, 0, 2, 8));  // descending
  EXPECT_FALSE(slot_rows_stacked(even, {0, 1, 2, 3}, 0, 4, 9));  // rows short of a slot: gaps
  EXPECT_TRUE(slot_rows_stacked(even, {0, 1, 2, 3}, 2, 1, 8));
  EXPECT_FALSE(slot_rows_stacked(even, {0, -1, 2, 3}, 0, 3, 8));
  EXPECT_FALSE(slot_rows_stacked(even, {0, 1, 2, 3}, 2, 3, 8));  // past the last micro-batch
  EXPECT_FALSE(slot_rows_stacked(even, {0, 1, 2, 3}, 0, 0, 8));
  const std::vector<MicroBatch> uneven = split_batch(30, 4);  // 8, 8, 7, 7
  EXPECT_TRUE(slot_rows_stacked(uneven, {0, 1, 2, 3}, 0, 3, 8));   // only the last member short
  EXPECT_FALSE(slot_rows_stacked(uneven, {0, 1, 2, 3}, 0, 4, 8));  // a short member inside
  EXPECT_TRUE(slot_rows_stacked(uneven, {0, 1, 2, 3}, 2, 1, 8));
}
}  // namespace
}  // namespace gpipe

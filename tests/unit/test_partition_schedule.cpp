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
                                    {OpKind::Backward, 1}, {OpKind::Backward, 0}};
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
                                       {OpKind::Backward, 0}}));
  const Schedule e = fill_drain(1, 2, Remat::ExceptLast);
  EXPECT_EQ(e.rematerialized, (std::vector<bool>{true, false}));
  EXPECT_EQ(e.ops[0], (std::vector<Op>{{OpKind::Forward, 0},
                                       {OpKind::Forward, 1},
                                       {OpKind::Backward, 1},
                                       {OpKind::Recompute, 0},
                                       {OpKind::Backward, 0}}));
  EXPECT_THROW(parse_remat("sometimes", "pipeline.remat"), InputError);
}

}  // namespace
}  // namespace gpipe

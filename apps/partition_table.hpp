#pragma once
// The partition table gpipe-train prints before training, and --check prints
// instead of training.

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/model/partition.hpp"
#include "gpipe/parallel/grid.hpp"

namespace gpipe::app {

/// What the table shows: the grid, the partition, per-layer costs (in
/// `cost_unit`) and per-cell activation bytes.
struct PartitionTable {
  GridShape grid;
  Partition partition;
  std::vector<double> costs;
  std::string cost_unit;
  std::vector<std::int64_t> activation_bytes;
  /// Per cell: the device bytes a rank needs (train/memory.hpp), shown
  /// against the budget (pipeline.memory_budget, 0: none).
  std::vector<std::int64_t> memory_bytes;
  std::int64_t memory_budget = 0;
};

/// Prints the run line ("gpipe-train: 2 ranks (cells), ..."), the input
/// shape, each cell's layers with their output shapes and parameters, and
/// the imbalance and bubble line to stdout.
void print_partition_table(const Deck& deck, const PartitionTable& table);

}  // namespace gpipe::app

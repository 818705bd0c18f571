#pragma once
// The layout of a run computed from the deck alone: the D x K grid, the
// largest micro-batch, the per-layer costs, the partition and each cell's
// activation bytes. Pipeline builds exactly this; `gpipe-train --check`
// prints it without initializing MPI or Kokkos (a login node, no GPU).

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/model/partition.hpp"
#include "gpipe/parallel/grid.hpp"
#include "gpipe/train/memory.hpp"

namespace gpipe {

/// Samples of the largest replica shard, ceil(N / D), with N =
/// training.batch_size and D replicas.
std::int64_t largest_shard(const Deck& deck, int replicas);

/// Rows of the largest micro-batch any cell sees: ceil(ceil(N / D) / M).
std::int64_t largest_micro_batch(const Deck& deck, int replicas);

/// The partition of deck.model into `cells` cells: pipeline.balance
/// "explicit" takes the deck's list (costs are only reported), any other
/// mode minimizes the largest cell's cost over `costs` (size L, layer order;
/// balance_min_max). Throws InputError for more cells than layers and for an
/// explicit list that does not fit (see explicit_partition).
Partition deck_partition(const Deck& deck, int cells, const std::vector<double>& costs);

/// A run's layout from the deck alone (no MPI, no Kokkos).
struct RunPlan {
  GridShape grid;                ///< D x K on the given rank count
  std::int64_t micro_batch = 0;  ///< largest micro-batch rows
  std::vector<double> costs;     ///< per layer, in `cost_unit`
  std::string cost_unit;         ///< params | flops
  Partition partition;
  std::vector<std::int64_t> activation_bytes;  ///< per cell (cell_activation_bytes)
  /// Per cell, the payload bytes of the boundary messages one training step
  /// of a full mini-batch sends: the shard's rows x the cell output's values
  /// forward (not the last cell) plus x the cell input's values backward
  /// (not the first), at the precision policy's wire size (2 bytes a value
  /// for bf16 / fp16, exactly half of float): what the summary's
  /// boundary_bytes_per_step measures. Empty when a cell runs several stages (pipeline.chunks > 1, zb_v, dualpipe_v).
  std::vector<std::int64_t> boundary_bytes;
  /// Per cell: the device bytes a rank of it allocates (train/memory.hpp),
  /// under the deck's kernel choice (`kernels:`, which decides conv2d's
  /// saved columns and workspace).
  std::vector<CellMemory> memory;
  /// Set when the deck's balance is "time": the partition shown is the
  /// flops one, because timing layers needs the device.
  bool time_balance_approximated = false;
};

/// The layout of `deck` on `ranks` ranks: grid_shape, then the costs of
/// pipeline.balance ("time" is replaced by "flops", see RunPlan; "explicit"
/// reports flops), deck_partition and the activation bytes of every cell in
/// the deck's precision, and every cell's memory. Selects the deck's
/// `kernels:` choice process-wide first (kernels::select; no Kokkos), as
/// Pipeline does, so the bytes are the run's. Throws InputError as
/// grid_shape, deck_partition and model_shapes do; the budget is checked
/// by the caller (check_memory_budget: Pipeline, --check, gpipe-plan).
RunPlan plan_run(const Deck& deck, int ranks);

}  // namespace gpipe

#pragma once
// The layout of a run computed from the deck alone: the D x K grid, the
// largest micro-batch, the per-layer costs, the partition and each cell's
// activation bytes. Pipeline builds exactly this; `gpipe-train --check`
// prints it without initializing MPI or Kokkos (a login node, no GPU).

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/model/partition.hpp"
#include "gpipe/pipeline/schedule.hpp"
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
/// With `pipeline_cells` = K > 0 the `cells` are the stages of a K-cell
/// pipeline (K x pipeline.chunks, 2K for zb_v / dualpipe_v, or a schedule
/// file's `stages`) and the errors name them as stages and say where their
/// count comes from (check_stage_count).
Partition deck_partition(const Deck& deck, int cells, const std::vector<double>& costs, int pipeline_cells = 0);

/// Makes `deck` (a checkpoint's training deck) describe a forward pass:
/// the training schedule's keys do not apply to one, so pipeline.schedule
/// becomes fill_drain with one stage per cell (chunks 1, w_group 1), a
/// pipeline.schedule_file is dropped (it may be absent where gpipe-infer
/// runs, or be for another K or M), a balance list for several stages per
/// cell becomes `params`, and the training memory budget is lifted. The
/// weights are per layer (as on a restart), so any layout reads them.
/// Before this gpipe-infer failed on a checkpoint of a schedule-file run
/// without the file, of dualpipe_v with --micro-batches below 2K, and of
/// interleaved_1f1b on a rank count M is no multiple of.
void forward_only_layout(Deck& deck);

/// Why a run of `deck` skips steps, for its reports (the epoch line, the
/// end-of-run warning): "non-finite loss or gradients (training.nonfinite:
/// skip_step)" in float, double and bf16; with fp16's loss scaling "fp16
/// gradient overflow (dynamic loss scaling, training.loss_scale*)", plus
/// " or a non-finite loss (training.nonfinite: skip_step)" when nonfinite
/// is skip_step (an overflow is skipped whatever training.nonfinite says).
std::string skipped_steps_reason(const Deck& deck);

/// What a run of `deck` trains with, for its reports (partition table,
/// warnings, run summary, trace header): "file PATH" when
/// pipeline.schedule_file is set (as gpipe-plan's prediction says), else
/// the name of pipeline.schedule.
std::string schedule_label(const Deck& deck);

/// pipeline.w_group is the most micro-batches one W op covers: above
/// training.micro_batches it is clamped to M (each stage runs one W of the
/// whole batch), as a group that does not divide M ends short. The note the
/// reports give then (gpipe-train on rank 0, gpipe-plan), naming both keys
/// and values; "" when the value applies as written (w_group <= M, or a
/// schedule file, whose W ops are its own).
std::string w_group_note(const Deck& deck);

/// The re-materialization a run of `deck` uses, for its reports:
/// "from the schedule file" when pipeline.schedule_file is set (its
/// rematerialized list replaces pipeline.remat), else pipeline.remat's name.
std::string remat_label(const Deck& deck);

/// The analytical idle fraction of the deck's schedule on `cells` cells
/// (bubble_fraction); NaN for a schedule file, which has no formula (JSON
/// writes null).
double analytical_bubble(const Deck& deck, int cells);

/// Throws InputError when the `stages` stages of a `cells`-cell pipeline
/// of `deck` outnumber its layers (every stage needs one): with one stage
/// per cell "pipeline: 6 cells (MPI ranks) but the model has only 5 layers;
/// ...", else naming the stages' origin, e.g. "pipeline: 6 stages
/// (pipeline.schedule zb_v: two per cell on 3 cells) but the model has only
/// 5 layers; every stage needs at least one layer (run with at most 2
/// cells)". Local (no MPI).
void check_stage_count(const Deck& deck, int stages, int cells);

/// Collective over `comm`: throws an agreed InputError on every rank unless
/// every rank holds the same `schedule` (cells, stages, micro-batches, stage
/// map, re-materialization and every op list): a schedule file that differs
/// between ranks (node-local copies) names pipeline.schedule_file and the
/// lowest rank whose schedule differs from rank 0's. One MPI_Bcast of a
/// 64-bit fingerprint and one agreement (gpipe::agree).
void check_same_schedule(const Schedule& schedule, const Deck& deck, MPI_Comm comm);

/// Collective over `comm`: throws an agreed InputError on every rank unless
/// every rank parsed the same deck (Deck::text: the deck after its --set
/// overrides), e.g. "b.yaml: rank 1 read another deck than rank 0 (a.yaml):
/// first difference in section optimizer: rank 1 has '  lr: 0.01', rank 0
/// has '  lr: 0.001' (...)", naming the lowest differing rank (a node-local
/// copy of the deck, or per-rank --set in an MPMD launch would otherwise
/// train wrong or hang). Pipeline's constructor calls it first. Two
/// MPI_Bcast of rank 0's deck text and path and one agreement.
void check_same_deck(const Deck& deck, MPI_Comm comm);

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

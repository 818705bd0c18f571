#include "partition_table.hpp"

#include <fmt/format.h>

#include <cmath>

#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
#include "gpipe/pipeline/schedule.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe::app {

void print_partition_table(const Deck& deck, const PartitionTable& t) {
  const auto& p = t.partition;
  const int S = p.cells(), K = t.grid.cells, M = deck.training.micro_batches, D = t.grid.replicas;
  if (D == 1)
    fmt::print("gpipe-train: {} ranks (cells), {} layers, precision {}, mini-batch {} in {} "
               "micro-batches, schedule {}, re-materialization {}\n",
               K, deck.model.layers.size(), deck.precision, deck.training.batch_size, M,
               schedule_label(deck), remat_label(deck));
  else
    fmt::print("gpipe-train: {} ranks = {} replicas (D) x {} cells (K), {} layers, precision {}, "
               "mini-batch {} in {} shards of {} micro-batches, schedule {}, re-materialization {}\n"
               "  grid: {}; gradient reduction {} in {} KiB buckets\n",
               D * K, D, K, deck.model.layers.size(), deck.precision, deck.training.batch_size, D, M,
               schedule_label(deck), remat_label(deck), t.grid.describe(),
               deck.parallel.deterministic_reduction ? "deterministic (replica order)" : "MPI_Iallreduce",
               deck.parallel.bucket_kib);
  const auto costs = p.cell_costs(t.costs);
  const auto shapes = model_shapes(deck.model);
  fmt::print("  input shape {}\n", deck.model.input_shape().str());
  // Stage k's cell: the schedule's stage map (interleaved_1f1b: k mod K; the
  // V schedules: k, then back, 2K - 1 - k; a schedule file's rank_of_stage).
  std::vector<int> stage_cell(static_cast<size_t>(S));
  for (int k = 0; k < S; ++k) stage_cell[size_t(k)] = k % K;
  if (S != K || !deck.pipeline.schedule_file.empty()) {
    const Schedule schedule = deck_schedule(deck, K);  // checked already: the run's
    if (int(schedule.rank_of_stage.size()) == S) stage_cell = schedule.rank_of_stage;
  }
  bool identity = S == K;  // stage k on cell k: the per-cell lines
  for (int k = 0; k < S && identity; ++k) identity = stage_cell[size_t(k)] == k;
  for (int k = 0; k < S; ++k) {  // one stage per cell, or several stages per cell (stage_cell)
    const int first = p.first_layer(k), count = p.counts[size_t(k)];
    const size_t c = size_t(stage_cell[size_t(k)]);  // the cell's memory (a rank's, all its stages)
    const std::string memory =
        c < t.memory_bytes.size()
            ? fmt::format(", {}memory {} ({} bytes){}", identity ? "" : "cell ", format_bytes(t.memory_bytes[c]),
                          t.memory_bytes[c],
                          t.memory_budget > 0
                              ? fmt::format(" of the budget {} ({:.1f}%{})", format_bytes(t.memory_budget),
                                            100.0 * double(t.memory_bytes[c]) / double(t.memory_budget),
                                            t.memory_bytes[c] > t.memory_budget ? ", OVER" : "")
                              : std::string())
            : std::string();
    if (identity)
      fmt::print("  cell {}: layers {}-{} ({} layers), cost {:.4g} ({}), activations {:.2f} MiB{}\n", k,
                 first, first + count - 1, count, costs[size_t(k)], t.cost_unit,
                 double(t.activation_bytes[size_t(k)]) / (1 << 20), memory);
    else
      fmt::print("  stage {} on cell {}: layers {}-{} ({} layers), cost {:.4g} ({}), cell activations {:.2f} MiB{}\n",
                 k, c, first, first + count - 1, count, costs[size_t(k)], t.cost_unit,
                 double(t.activation_bytes[c]) / (1 << 20), memory);
    for (int l = first; l < first + count; ++l) {
      const auto& s = shapes[size_t(l)];
      fmt::print("    layer {:>2} {:<17} output {:<16} {:>9} parameters\n", l, s.type(),
                 s.output.str(), s.parameter_count());
    }
  }
  const double bubble = analytical_bubble(deck, K);  // NaN: a schedule file (no formula)
  if (std::isnan(bubble))
    fmt::print("  imbalance (max/mean cell cost) {:.3f}; schedule {}\n", p.imbalance(t.costs), schedule_label(deck));
  else
    fmt::print("  imbalance (max/mean cell cost) {:.3f}; bubble of {} = {:.3f}\n", p.imbalance(t.costs),
               schedule_label(deck), bubble);
}

}  // namespace gpipe::app

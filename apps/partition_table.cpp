#include "partition_table.hpp"

#include <fmt/format.h>

#include <cmath>

#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
#include "gpipe/pipeline/schedule.hpp"
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
  for (int k = 0; k < S; ++k) {  // one stage per cell, or K x pipeline.chunks stages, stage k on cell k mod K
    const int first = p.first_layer(k), count = p.counts[size_t(k)];
    const std::string memory =
        size_t(k) < t.memory_bytes.size()
            ? fmt::format(", memory {} ({} bytes){}", format_bytes(t.memory_bytes[size_t(k)]), t.memory_bytes[size_t(k)],
                          t.memory_budget > 0
                              ? fmt::format(" of the budget {} ({:.1f}%{})", format_bytes(t.memory_budget),
                                            100.0 * double(t.memory_bytes[size_t(k)]) / double(t.memory_budget),
                                            t.memory_bytes[size_t(k)] > t.memory_budget ? ", OVER" : "")
                              : std::string())
            : std::string();
    if (S == K)
      fmt::print("  cell {}: layers {}-{} ({} layers), cost {:.4g} ({}), activations {:.2f} MiB{}\n", k,
                 first, first + count - 1, count, costs[size_t(k)], t.cost_unit,
                 double(t.activation_bytes[size_t(k)]) / (1 << 20), memory);
    else
      fmt::print("  stage {} on cell {}: layers {}-{} ({} layers), cost {:.4g} ({}), cell activations {:.2f} MiB\n",
                 k, k % K, first, first + count - 1, count, costs[size_t(k)], t.cost_unit,
                 double(t.activation_bytes[size_t(k % K)]) / (1 << 20));
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

#include "gpipe/train/plan.hpp"
#include "gpipe/core/precision.hpp"

#include "gpipe/pipeline/schedule_file.hpp"

#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/cell.hpp"

namespace gpipe {

std::int64_t largest_shard(const Deck& deck, int replicas) {
  return (deck.training.batch_size + replicas - 1) / replicas;
}

std::int64_t largest_micro_batch(const Deck& deck, int replicas) {
  const int M = deck.training.micro_batches;
  return (largest_shard(deck, replicas) + M - 1) / M;
}

Partition deck_partition(const Deck& deck, int cells, const std::vector<double>& costs) {
  const int L = int(deck.model.layers.size());
  if (deck.pipeline.balance == "explicit") return explicit_partition(deck.pipeline.counts, L, cells);
  return balance_min_max(costs, cells);
}

RunPlan plan_run(const Deck& deck, int ranks) {
  RunPlan plan;
  kernels::select(kernels::parse_choice(deck.kernels, deck.path + ": kernels"));  // conv2d's saved bytes
  kernels::set_tf32(deck.pipeline.tf32);  // cuDNN's workspace sizes follow its math type
  plan.grid = grid_shape(deck, ranks);
  const int K = plan.grid.cells, D = plan.grid.replicas;
  plan.micro_batch = largest_micro_batch(deck, D);
  const auto shapes = model_shapes(deck.model);
  const std::string& balance = deck.pipeline.balance;
  plan.time_balance_approximated = balance == "time";
  plan.cost_unit = balance == "params" ? "params" : "flops";
  for (const auto& layer : shapes)
    plan.costs.push_back(plan.cost_unit == "params" ? double(layer.parameter_count())
                                                    : layer.flops(plan.micro_batch, layer.index > 0));
  // By stage: the schedule's (K x chunks, 2K for the V schedules, or a
  // schedule file's), checked (deck_schedule throws naming its first bad op).
  const Schedule schedule = deck_schedule(deck, K);
  plan.partition = deck_partition(deck, schedule.stages, plan.costs);
  CellOptions options;
  options.custom_schedule = schedule;
  options.max_batch = largest_shard(deck, D);
  options.micro_batches = deck.training.micro_batches;
  options.remat = deck.pipeline.remat;
  options.schedule = deck.pipeline.schedule;
  options.chunks = deck.pipeline.chunks;
  options.wire = precision_policy(deck.precision).wire;  // 16-bit storage (stores_16_bit)
  options.activation_storage16 = deck.pipeline.activation_storage16;
  const std::int64_t scalar = precision_policy(deck.precision).master_bytes();  // the cells' buffers
  for (int k = 0; k < K; ++k)
    plan.activation_bytes.push_back(cell_activation_bytes(shapes, plan.partition, k, options, scalar));
  const std::int64_t wire = precision_policy(deck.precision).wire_bytes();
  for (int k = 0; k < K && schedule.stages == K; ++k) {  // one stage per cell (several: not predicted)
    const int first = plan.partition.first_layer(k), last = first + plan.partition.counts[size_t(k)] - 1;
    std::int64_t values = 0;
    if (k + 1 < K) values += shapes[size_t(last)].output.size();  // activations forward
    if (k > 0) values += shapes[size_t(first)].input.size();     // gradients backward
    plan.boundary_bytes.push_back(options.max_batch * values * wire);
  }
  plan.memory = cell_memory(deck, plan.partition, D, K);
  return plan;
}

}  // namespace gpipe

#include "gpipe/predict/predict.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "gpipe/core/error.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/schedule_memory.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {

const std::vector<std::string>& network_presets() {
  static const std::vector<std::string> names{"shm", "10GbE", "hdr200"};
  return names;
}

Network network_preset(const std::string& name) {
  Network n;
  n.name = name;
  if (name == "shm") {
    n.p2p = {2e-6, 6e9};
    n.allreduce = {2e-6, 1.44e9};
  } else if (name == "10GbE") {
    n.p2p = {25e-6, 1.25e9};
    n.allreduce = n.p2p;
  } else if (name == "hdr200") {
    n.p2p = {1.5e-6, 25e9};
    n.allreduce = n.p2p;
  } else {
    throw InputError(fmt::format("--link: expected one of shm, 10GbE, hdr200, got '{}'", name));
  }
  return n;
}

std::int64_t Prediction::max_memory_bytes() const {
  std::int64_t m = 0;
  for (const auto& c : cells_detail) m = std::max(m, c.memory_bytes);
  return m;
}

double optimizer_rate(const OptimizerSpec& optimizer) { return optimizer.type == "sgd" ? 34e9 : 5.0e9; }

namespace {

std::int64_t scalar_bytes(const Deck& deck) { return precision_policy(deck.precision).master_bytes(); }

// Arrays the optimizer step reads or writes per parameter (gradient
// included), and the optimizer state per parameter.
int optimizer_arrays(const OptimizerSpec& o) { return o.type == "sgd" ? (o.momentum > 0 ? 5 : 3) : 7; }

// The deck with the partition the runner would use: pipeline.balance time
// measures each layer's forward + backward, which the predicted layer times
// stand for; other modes are plan_run's own.
Deck partitioned_deck(const Deck& deck, int ranks, const PredictOptions& options) {
  if (deck.pipeline.balance != "time") return deck;
  const GridShape grid = grid_shape(deck, ranks);
  const auto shapes = model_shapes(deck.model);
  const std::int64_t rows = largest_micro_batch(deck, grid.replicas);
  std::vector<double> costs;
  for (const auto& layer : shapes) {
    const LayerSeconds s = options.costs.seconds(layer, rows);
    costs.push_back(s.forward + s.backward_input + s.backward_weights);
  }
  Deck out = deck;
  out.pipeline.balance = "explicit";
  out.pipeline.counts = deck_partition(deck, deck_schedule(deck, grid.cells).stages, costs, grid.cells).counts;
  return out;
}

struct CellLayers {
  std::vector<const LayerShape*> layers;
  std::vector<bool> splits;
  std::vector<bool> whole;  // [l] splits and whole_batch_weights (a stacked W over several micro-batches)
  bool batch_weights = false;  // the stage runs a BatchWeights op (fill_drain's whole-batch W)
};

// The op durations of one micro-batch of `rows` on a cell. With a
// BatchWeights op the B op leaves the whole-batch layers' W to it.
OpSeconds op_seconds(const CellLayers& cell, const CostSource& costs, std::int64_t rows) {
  OpSeconds s;
  const size_t c = cell.layers.size();
  for (size_t l = 0; l < c; ++l) {
    const LayerSeconds t = costs.seconds(*cell.layers[l], rows);
    s.forward += t.forward;
    if (l + 1 < c) s.recompute += t.forward;
    s.backward += t.backward_input + (cell.batch_weights && cell.whole[l] ? 0.0 : t.backward_weights);
    s.backward_input += t.backward_input + (cell.splits[l] ? 0.0 : t.backward_weights);
    s.backward_weights += cell.splits[l] ? t.backward_weights : 0.0;
  }
  return s;
}

// Seconds of the whole_batch_weights layers' W over `rows` stacked rows
// (one GEMM each: a BatchWeights op, or a grouped W's stacked part).
double stacked_weights(const CellLayers& cell, const CostSource& costs, std::int64_t rows) {
  double w = 0;
  for (size_t l = 0; l < cell.layers.size(); ++l)
    if (cell.whole[l]) w += costs.seconds(*cell.layers[l], rows).backward_weights;
  return w;
}

// The gradient buckets of one cell as GradientReducer forms them (from the
// last layer backwards, each closed at >= bucket_bytes, parameter-free runs
// dropped), each with the op and offset at which it is final.
std::vector<BucketSpec> cell_buckets(const CellLayers& cell, const std::vector<Op>& ops,
                                     const CostSource& costs, const std::vector<std::int64_t>& rows,
                                     std::int64_t bucket_bytes, std::int64_t scalar) {
  const int c = int(cell.layers.size());
  // Layer l's final accumulation: the last op that accumulates it (B; I for
  // a layer that does not split, W for one that does), and its end offset
  // in that op (the op walks the layers from the last down).
  std::vector<int> final_op(size_t(c), -1);
  std::vector<double> offset(size_t(c), 0);
  for (int i = 0; i < int(ops.size()); ++i)
    for (int l = 0; l < c; ++l) {
      const OpKind k = ops[size_t(i)].kind;
      const bool split = cell.splits[size_t(l)];
      const bool batch = cell.batch_weights && cell.whole[size_t(l)];  // its W in the BatchWeights op
      if ((k == OpKind::Backward && !batch) || (k == OpKind::BackwardInput && !split) ||
          (k == OpKind::BackwardWeights && split) || (k == OpKind::BatchWeights && batch))
        final_op[size_t(l)] = i;
    }
  std::int64_t total_rows = 0;
  for (const auto r : rows) total_rows += r;
  for (int l = 0; l < c; ++l) {
    const int i = final_op[size_t(l)];
    if (i < 0) continue;
    const Op& op = ops[size_t(i)];
    std::int64_t op_rows = 0;  // rows the op covers (a grouped W: its micro-batches'; G: the batch's)
    for (int m = op.micro_batch; m < op.end(); ++m) op_rows += rows[size_t(m)];
    if (op.kind == OpKind::BatchWeights) op_rows = total_rows;
    double t = 0;
    for (int j = c - 1; j >= l; --j) {
      const bool split = cell.splits[size_t(j)], whole = cell.whole[size_t(j)];
      const bool batch = cell.batch_weights && whole;
      const LayerSeconds s = costs.seconds(*cell.layers[size_t(j)], op_rows);
      if (op.kind == OpKind::Backward) t += s.backward_input + (batch ? 0.0 : s.backward_weights);
      if (op.kind == OpKind::BackwardInput) t += s.backward_input + (split ? 0.0 : s.backward_weights);
      if (op.kind == OpKind::BatchWeights) t += batch ? s.backward_weights : 0.0;
      if (op.kind == OpKind::BackwardWeights && split) {
        if (whole || op.count == 1) t += s.backward_weights;  // one pass over the op's rows
        else
          for (int m = op.micro_batch; m < op.end(); ++m)  // one pass per micro-batch
            t += costs.seconds(*cell.layers[size_t(j)], rows[size_t(m)]).backward_weights;
      }
    }
    offset[size_t(l)] = t;
  }
  std::vector<BucketSpec> buckets;
  std::int64_t pending = 0;
  for (int l = c - 1; l >= 0; --l) {
    pending += cell.layers[size_t(l)]->parameter_count() * scalar;
    if ((pending >= bucket_bytes || l == 0) && pending > 0) {
      // Final once every layer l..c-1 is: the latest final op among them,
      // at the offset of the lowest layer finishing in it.
      int op = -1;
      double off = 0;
      for (int j = l; j < c; ++j)
        if (final_op[size_t(j)] > op) op = final_op[size_t(j)];
      for (int j = c - 1; j >= l; --j)
        if (final_op[size_t(j)] == op) off = offset[size_t(j)];
      if (op < 0) op = int(ops.size()) - 1, off = 0;
      buckets.push_back({pending, op, off});
      pending = 0;
    }
  }
  return buckets;
}

}  // namespace

// The partition into the schedule's stages: the run's K-cell partition with
// one stage per rank, else deck_partition over S stages with the costs the
// balance mode uses (predicted layer times for "time", as partitioned_deck).
Partition stage_partition(const Deck& deck, const RunPlan& plan, int stages, const PredictOptions& options) {
  if (stages == plan.partition.cells()) return plan.partition;
  if (deck.pipeline.balance != "time" || !deck.pipeline.counts.empty())
    return deck_partition(deck, stages, plan.costs);
  std::vector<double> costs;
  for (const auto& layer : model_shapes(deck.model)) {
    const LayerSeconds t = options.costs.seconds(layer, plan.micro_batch);
    costs.push_back(t.forward + t.backward_input + t.backward_weights);
  }
  return balance_min_max(costs, stages);
}

StepInput step_input(const Deck& in_deck, int ranks, const PredictOptions& options) {
  const Deck deck = partitioned_deck(in_deck, ranks, options);
  const RunPlan plan = plan_run(deck, ranks);
  return step_input(in_deck, ranks, options, deck_schedule(deck, plan.grid.cells));
}

StepInput step_input(const Deck& in_deck, int ranks, const PredictOptions& options, const Schedule& schedule) {
  const Deck deck = partitioned_deck(in_deck, ranks, options);
  const RunPlan plan = plan_run(deck, ranks);
  const int K = plan.grid.cells, D = plan.grid.replicas, M = deck.training.micro_batches;
  const auto shapes = model_shapes(deck.model);
  const std::int64_t scalar = scalar_bytes(deck);
  std::vector<std::int64_t> rows;
  for (const auto& mb : split_batch(largest_shard(deck, D), M)) rows.push_back(mb.size);

  if (schedule.cells != K || schedule.micro_batches != M)
    throw InputError(fmt::format("gpipe-plan: the schedule is for {} ranks and {} micro-batches, the deck runs K = {} "
                                 "and M = {}",
                                 schedule.cells, schedule.micro_batches, K, M));
  StepInput in;
  in.schedule = schedule;
  const int S = in.schedule.stages;
  // A deck whose balance is an explicit list of K counts names cells, not
  // the S > K stages of a multi-stage schedule: split by FLOPs then.
  Deck stage_deck = in_deck;
  if (stage_deck.pipeline.balance == "explicit" && int(stage_deck.pipeline.counts.size()) != S) {
    stage_deck.pipeline.balance = "flops";
    stage_deck.pipeline.counts.clear();
  }
  const Partition partition =
      plan.partition.cells() == S ? plan.partition : stage_partition(stage_deck, plan, S, options);
  in.link = options.network.p2p;
  // pipeline.wait: sleep: the receiver notices a message up to one poll
  // period after it arrives (PredictOptions::wait_hop_s).
  if (deck.pipeline.wait_sleep) in.link.latency_s += options.wait_hop_s >= 0 ? options.wait_hop_s : kWaitSleepHopS;
  in.allreduce = options.network.allreduce;
  in.replicas = D;
  in.deterministic_reduction = deck.parallel.deterministic_reduction;
  std::vector<CellLayers> stage_layers{size_t(S)};
  std::vector<std::int64_t> params(size_t(K), 0);
  for (int st = 0; st < S; ++st) {
    CellLayers& cell = stage_layers[size_t(st)];
    const int first = partition.first_layer(st), count = partition.counts[size_t(st)];
    for (int l = first; l < first + count; ++l) {
      cell.layers.push_back(&shapes[size_t(l)]);
      cell.splits.push_back(shapes[size_t(l)].entry && shapes[size_t(l)].entry->splits_backward);
      cell.whole.push_back(cell.splits.back() && shapes[size_t(l)].entry->whole_batch_weights);
      params[size_t(in.schedule.rank_of_stage[size_t(st)])] += shapes[size_t(l)].parameter_count();
    }
    const int rank = in.schedule.rank_of_stage[size_t(st)];
    for (const Op& op : in.schedule.ops[size_t(rank)])
      if (op.stage == st && op.kind == OpKind::BatchWeights) cell.batch_weights = true;
    std::vector<OpSeconds> per_mb;
    for (int m = 0; m < M; ++m)
      per_mb.push_back(m > 0 && rows[size_t(m)] == rows[size_t(m - 1)] ? per_mb.back()
                                                                       : op_seconds(cell, options.costs, rows[size_t(m)]));
    in.seconds.push_back(per_mb);
    std::int64_t kept = 0;  // outputs of the stage's layers, per sample
    for (const LayerShape* l : cell.layers) kept += l->output.size();
    in.activation_bytes.push_back(rows.front() * kept * scalar);
    if (st + 1 < S) {
      const std::int64_t width = shapes[size_t(first + count - 1)].output.size();
      std::vector<std::int64_t> bytes;
      for (const auto r : rows) bytes.push_back(r * width * scalar);
      in.boundary_bytes.push_back(bytes);
    }
  }
  // The whole-batch W (BatchWeights) over the shard's rows, booked on its
  // op's micro-batch; a grouped W: the stacked layers' W over the group's
  // rows shared equally by its micro-batches, the other splitting layers'
  // W per micro-batch (simulate_step sums the group's shares).
  std::int64_t total_rows = 0;
  for (const auto r : rows) total_rows += r;
  for (const auto& ops : in.schedule.ops)
    for (const Op& op : ops) {
      const CellLayers& cell = stage_layers[size_t(op.stage)];
      auto& sec = in.seconds[size_t(op.stage)];
      if (op.kind == OpKind::BatchWeights) sec[size_t(op.micro_batch)].batch_weights = stacked_weights(cell, options.costs, total_rows);
      if (op.kind != OpKind::BackwardWeights || op.count == 1) continue;
      std::int64_t group_rows = 0;
      for (int m = op.micro_batch; m < op.end(); ++m) group_rows += rows[size_t(m)];
      const double share = stacked_weights(cell, options.costs, group_rows) / double(op.count);
      for (int m = op.micro_batch; m < op.end(); ++m)
        sec[size_t(m)].backward_weights = op_seconds(cell, options.costs, rows[size_t(m)]).backward_weights -
                                          stacked_weights(cell, options.costs, rows[size_t(m)]) + share;
    }
  const double rate =
      options.optimizer_bytes_per_s > 0 ? options.optimizer_bytes_per_s : optimizer_rate(deck.optimizer);
  for (int k = 0; k < K; ++k) {
    in.optimizer_s.push_back(double(params[size_t(k)] * scalar * optimizer_arrays(deck.optimizer)) / rate);
    if (D == 1) continue;
    // The rank's buckets: each of its stages' (highest stage first), op
    // indices mapped from the stage's own ops into the rank's list.
    std::vector<BucketSpec> buckets;
    const auto& ops = in.schedule.ops[size_t(k)];
    for (int st = S - 1; st >= 0; --st) {
      if (in.schedule.rank_of_stage[size_t(st)] != k) continue;
      std::vector<Op> own;
      std::vector<int> position;
      for (int i = 0; i < int(ops.size()); ++i)
        if (ops[size_t(i)].stage == st) own.push_back(ops[size_t(i)]), position.push_back(i);
      for (BucketSpec b : cell_buckets(stage_layers[size_t(st)], own, options.costs, rows,
                                       deck.parallel.bucket_kib * 1024, scalar)) {
        b.op = position[size_t(b.op)];
        buckets.push_back(b);
      }
    }
    in.buckets.push_back(buckets);
  }
  return in;
}

Prediction predict(const Deck& in_deck, int ranks, const PredictOptions& options) {
  const Deck deck = partitioned_deck(in_deck, ranks, options);
  const RunPlan plan = plan_run(deck, ranks);
  const StepInput in = step_input(deck, ranks, options);
  const auto shapes = model_shapes(deck.model);
  const int K = plan.grid.cells, D = plan.grid.replicas, M = deck.training.micro_batches;
  const std::int64_t scalar = scalar_bytes(deck), N = deck.training.batch_size;

  Prediction p;
  p.ranks = ranks;
  p.replicas = D;
  p.cells = K;
  p.micro_batches = M;
  p.schedule = deck.pipeline.schedule_file.empty() ? to_string(deck.pipeline.schedule)
                                                   : "file " + deck.pipeline.schedule_file;
  p.remat = to_string(deck.pipeline.remat);
  p.network = options.network.name;
  p.batch_size = N;
  p.micro_batch_rows = plan.micro_batch;
  p.timing = simulate_step(in);
  p.step_time_s = p.timing.makespan;
  p.samples_per_s = p.step_time_s > 0 ? double(N) / p.step_time_s : 0.0;
  p.bubble_fraction = p.timing.bubble_fraction;
  p.bubble_analytical = deck.pipeline.schedule_file.empty() ? bubble_fraction(deck.pipeline.schedule, K, M) : -1.0;
  double busy_sum = 0, busy_max = 0;
  for (int k = 0; k < K; ++k) {
    const auto& t = p.timing.cells[size_t(k)];
    CellPrediction c;
    // The rank's stages (one per rank: stage k); first_layer is its first
    // stage's, layers the count over all of its stages.
    std::vector<int> own;
    for (int st = 0; st < plan.partition.cells(); ++st)
      if (plan.partition.cells() == K ? st == k : in.schedule.rank_of_stage[size_t(st)] == k) own.push_back(st);
    c.first_layer = plan.partition.first_layer(own.front());
    c.layers = 0;
    for (const int st : own) c.layers += plan.partition.counts[size_t(st)];
    c.busy_s = t.busy;
    c.reduce_exposed_s = t.reduce_exposed;
    c.idle_s = p.step_time_s - t.busy - t.reduce_exposed;
    c.peak_micro_batches = in.schedule.stages == K ? plan_buffers(in.schedule, k).micro_batch.slots
                                                   : peak_held(in.schedule, k);
    c.activation_bytes = plan.activation_bytes[size_t(k)];
    std::int64_t params = 0;
    for (const int st : own)
      for (int l = plan.partition.first_layer(st); l < plan.partition.first_layer(st) + plan.partition.counts[size_t(st)];
           ++l)
        params += shapes[size_t(l)].parameter_count();
    c.parameter_bytes = params * scalar;
    c.memory = plan.memory[size_t(k)];
    c.memory_bytes = c.memory.total();  // train/memory.hpp: every View a rank of the cell allocates
    for (const int st : own)  // every stage boundary that crosses ranks: its activation and gradient
      if (st + 1 < int(in.schedule.rank_of_stage.size()) && in.schedule.rank_of_stage[size_t(st + 1)] != k)
        p.pipeline_bytes += 2 * N *
                            shapes[size_t(plan.partition.first_layer(st) + plan.partition.counts[size_t(st)] - 1)]
                                .output.size() *
                            scalar;
    if (D > 1)
      p.allreduce_bytes += deck.parallel.deterministic_reduction ? std::int64_t(D) * (D - 1) * c.parameter_bytes
                                                                 : 2 * std::int64_t(D - 1) * c.parameter_bytes;
    busy_sum += t.busy;
    busy_max = std::max(busy_max, t.busy);
    p.cells_detail.push_back(c);
  }
  p.comm_bytes = p.pipeline_bytes + p.allreduce_bytes;
  p.imbalance = busy_sum > 0 ? busy_max / (busy_sum / K) : 1.0;
  return p;
}

}  // namespace gpipe

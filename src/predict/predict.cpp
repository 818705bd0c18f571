#include "gpipe/predict/predict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "gpipe/core/error.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
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

std::int64_t scalar_bytes(const Deck& deck) { return deck.precision == "double" ? 8 : 4; }

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
  out.pipeline.counts = deck_partition(deck, grid.cells, costs).counts;
  return out;
}

struct CellLayers {
  std::vector<const LayerShape*> layers;
  std::vector<bool> splits;
};

// The op durations of one micro-batch of `rows` on a cell.
OpSeconds op_seconds(const CellLayers& cell, const CostSource& costs, std::int64_t rows) {
  OpSeconds s;
  const size_t c = cell.layers.size();
  for (size_t l = 0; l < c; ++l) {
    const LayerSeconds t = costs.seconds(*cell.layers[l], rows);
    s.forward += t.forward;
    if (l + 1 < c) s.recompute += t.forward;
    s.backward += t.backward_input + t.backward_weights;
    s.backward_input += t.backward_input + (cell.splits[l] ? 0.0 : t.backward_weights);
    s.backward_weights += cell.splits[l] ? t.backward_weights : 0.0;
  }
  return s;
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
      if (k == OpKind::Backward || (k == OpKind::BackwardInput && !split) || (k == OpKind::BackwardWeights && split))
        final_op[size_t(l)] = i;
    }
  for (int l = 0; l < c; ++l) {
    const int i = final_op[size_t(l)];
    if (i < 0) continue;
    const Op& op = ops[size_t(i)];
    double t = 0;
    for (int j = c - 1; j >= l; --j) {
      const LayerSeconds s = costs.seconds(*cell.layers[size_t(j)], rows[size_t(op.micro_batch)]);
      const bool split = cell.splits[size_t(j)];
      if (op.kind == OpKind::Backward) t += s.backward_input + s.backward_weights;
      if (op.kind == OpKind::BackwardInput) t += s.backward_input + (split ? 0.0 : s.backward_weights);
      if (op.kind == OpKind::BackwardWeights) t += split ? s.backward_weights : 0.0;
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

StepInput step_input(const Deck& in_deck, int ranks, const PredictOptions& options) {
  const Deck deck = partitioned_deck(in_deck, ranks, options);
  const RunPlan plan = plan_run(deck, ranks);
  const int K = plan.grid.cells, D = plan.grid.replicas, M = deck.training.micro_batches;
  const auto shapes = model_shapes(deck.model);
  const std::int64_t scalar = scalar_bytes(deck);
  std::vector<std::int64_t> rows;
  for (const auto& mb : split_batch(largest_shard(deck, D), M)) rows.push_back(mb.size);

  StepInput in;
  in.schedule = make_schedule(deck.pipeline.schedule, K, M, deck.pipeline.remat);
  in.link = options.network.p2p;
  in.allreduce = options.network.allreduce;
  in.replicas = D;
  in.deterministic_reduction = deck.parallel.deterministic_reduction;
  for (int k = 0; k < K; ++k) {
    CellLayers cell;
    const int first = plan.partition.first_layer(k), count = plan.partition.counts[size_t(k)];
    std::int64_t params = 0;
    for (int l = first; l < first + count; ++l) {
      cell.layers.push_back(&shapes[size_t(l)]);
      cell.splits.push_back(shapes[size_t(l)].entry && shapes[size_t(l)].entry->splits_backward);
      params += shapes[size_t(l)].parameter_count();
    }
    std::vector<OpSeconds> per_mb;
    for (int m = 0; m < M; ++m)
      per_mb.push_back(m > 0 && rows[size_t(m)] == rows[size_t(m - 1)] ? per_mb.back()
                                                                       : op_seconds(cell, options.costs, rows[size_t(m)]));
    in.seconds.push_back(per_mb);
    if (k + 1 < K) {
      const std::int64_t width = shapes[size_t(first + count - 1)].output.size();
      std::vector<std::int64_t> bytes;
      for (const auto r : rows) bytes.push_back(r * width * scalar);
      in.boundary_bytes.push_back(bytes);
    }
    const double rate =
        options.optimizer_bytes_per_s > 0 ? options.optimizer_bytes_per_s : optimizer_rate(deck.optimizer);
    in.optimizer_s.push_back(double(params * scalar * optimizer_arrays(deck.optimizer)) / rate);
    if (D > 1)
      in.buckets.push_back(cell_buckets(cell, in.schedule.ops[size_t(k)], options.costs, rows,
                                        deck.parallel.bucket_kib * 1024, scalar));
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
  p.schedule = to_string(deck.pipeline.schedule);
  p.remat = to_string(deck.pipeline.remat);
  p.network = options.network.name;
  p.batch_size = N;
  p.micro_batch_rows = plan.micro_batch;
  p.timing = simulate_step(in);
  p.step_time_s = p.timing.makespan;
  p.samples_per_s = p.step_time_s > 0 ? double(N) / p.step_time_s : 0.0;
  p.bubble_fraction = p.timing.bubble_fraction;
  p.bubble_analytical = bubble_fraction(deck.pipeline.schedule, K, M);
  double busy_sum = 0, busy_max = 0;
  for (int k = 0; k < K; ++k) {
    const auto& t = p.timing.cells[size_t(k)];
    CellPrediction c;
    c.first_layer = plan.partition.first_layer(k);
    c.layers = plan.partition.counts[size_t(k)];
    c.busy_s = t.busy;
    c.reduce_exposed_s = t.reduce_exposed;
    c.idle_s = p.step_time_s - t.busy - t.reduce_exposed;
    c.peak_micro_batches = plan_buffers(in.schedule, k).micro_batch.slots;
    c.activation_bytes = plan.activation_bytes[size_t(k)];
    std::int64_t params = 0;
    for (int l = c.first_layer; l < c.first_layer + c.layers; ++l) params += shapes[size_t(l)].parameter_count();
    c.parameter_bytes = params * scalar;
    c.memory = plan.memory[size_t(k)];
    c.memory_bytes = c.memory.total();  // train/memory.hpp: every View a rank of the cell allocates
    if (k + 1 < K) p.pipeline_bytes += 2 * N * shapes[size_t(c.first_layer + c.layers - 1)].output.size() * scalar;
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

#include "gpipe/predict/simulate.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpipe {

double OpSeconds::of(OpKind kind) const {
  switch (kind) {
    case OpKind::Forward: return forward;
    case OpKind::Recompute: return recompute;
    case OpKind::Backward: return backward;
    case OpKind::BackwardInput: return backward_input;
    case OpKind::BackwardWeights: return backward_weights;
    case OpKind::BatchWeights: return batch_weights;
  }
  return 0;
}

namespace {

bool sends_gradient(OpKind kind) { return kind == OpKind::Backward || kind == OpKind::BackwardInput; }

// Seconds a message of `bytes` takes from hand-over to arrival on `link`
// through `wire_free` (the wire's free time, updated): pipeline/link.hpp's Wire.
double arrival(const LinkModel& link, double& wire_free, double sent, std::int64_t bytes) {
  const double start = std::max(sent, wire_free);
  wire_free = start + double(link.transmit_ns(bytes)) * 1e-9;
  return wire_free + link.latency_s;
}

void check_sizes(const StepInput& in) {
  const Schedule& s = in.schedule;
  const int K = s.cells, M = s.micro_batches, S = s.stages;
  const auto fail = [](const std::string& what) { throw std::invalid_argument("simulate_step: " + what); };
  if (K < 1 || M < 1 || int(s.ops.size()) != K) fail("the schedule has no cells or micro-batches");
  if (S < K || int(s.rank_of_stage.size()) != S) fail("the schedule's stage map must have stages >= cells entries");
  for (const int r : s.rank_of_stage)
    if (r < 0 || r >= K) fail("the stage map names a rank outside 0..cells-1");
  if (int(in.seconds.size()) != S) fail("seconds must have one entry per stage");
  for (const auto& c : in.seconds)
    if (int(c.size()) != M) fail("seconds[stage] must have one entry per micro-batch");
  if (S > 1 && int(in.boundary_bytes.size()) != S - 1) fail("boundary_bytes must have stages-1 entries");
  for (const auto& b : in.boundary_bytes)
    if (int(b.size()) != M) fail("boundary_bytes[b] must have one entry per micro-batch");
  if (!in.optimizer_s.empty() && int(in.optimizer_s.size()) != K) fail("optimizer_s must be empty or per cell");
  if (in.replicas > 1 && int(in.buckets.size()) != K) fail("buckets must have one entry per cell when D > 1");
  for (int k = 0; k < K; ++k)
    for (const Op& op : s.ops[size_t(k)])
      if (op.stage < 0 || op.stage >= S || s.rank_of_stage[size_t(op.stage)] != k || op.micro_batch < 0 ||
          op.count < 1 || op.end() > M)
        fail("an op's stage or micro-batch is out of range or not on its rank (check_schedule names it)");
}

}  // namespace

StepTiming simulate_step(const StepInput& in) {
  check_sizes(in);
  const Schedule& s = in.schedule;
  const int K = s.cells, M = s.micro_batches, S = s.stages;
  const auto rank = [&](int stage) { return s.rank_of_stage[size_t(stage)]; };

  StepTiming out;
  out.cells.resize(size_t(K));
  // [stage][m]: arrival of m's activation at the stage (from stage - 1) and
  // of its gradient (from stage + 1); negative: not sent yet. Between stages
  // of one rank a message is a local hand-over: it arrives when sent.
  std::vector<std::vector<double>> act_arrival(size_t(S), std::vector<double>(size_t(M), -1));
  std::vector<std::vector<double>> grad_arrival = act_arrival;
  // [sender * K + receiver]: one wire per direction of each rank pair, so
  // with one stage per rank the forward and backward wires of today.
  std::vector<double> wire(size_t(K) * size_t(K), 0);
  const auto send = [&](int from_stage, int to_stage, double end, std::int64_t bytes) {
    const int a = rank(from_stage), b = rank(to_stage);
    return a == b ? end : arrival(in.link, wire[size_t(a) * size_t(K) + size_t(b)], end, bytes);
  };
  std::vector<int> next(size_t(K), 0);
  std::vector<double> free_at(size_t(K), 0);
  for (int k = 0; k < K; ++k) out.cells[size_t(k)].ops.resize(s.ops[size_t(k)].size());

  // Each pass runs, on every cell, every op whose message has arrived; a pass
  // that runs nothing while ops remain is a deadlock. Messages of one
  // direction are handed to their wire in the sender's op order, so the
  // wire sees them in the order the runner sends them.
  for (bool progress = true; progress;) {
    progress = false;
    for (int k = 0; k < K; ++k) {
      const auto& ops = s.ops[size_t(k)];
      auto& cell = out.cells[size_t(k)];
      while (next[size_t(k)] < int(ops.size())) {
        const int i = next[size_t(k)];
        const Op& op = ops[size_t(i)];
        const auto m = size_t(op.micro_batch);
        const auto st = size_t(op.stage);
        double ready = free_at[size_t(k)];
        if (op.kind == OpKind::Forward && op.stage > 0) {
          if (act_arrival[st][m] < 0) break;
          ready = std::max(ready, act_arrival[st][m]);
        }
        if (sends_gradient(op.kind) && op.stage < S - 1) {
          if (grad_arrival[st][m] < 0) break;
          ready = std::max(ready, grad_arrival[st][m]);
        }
        double seconds = in.seconds[st][m].of(op.kind);
        for (int q = op.micro_batch + 1; q < op.end(); ++q) seconds += in.seconds[st][size_t(q)].of(op.kind);
        const double end = ready + seconds;
        cell.ops[size_t(i)] = {ready, end};
        cell.busy += end - ready;
        free_at[size_t(k)] = end;
        if (op.kind == OpKind::Forward && op.stage < S - 1)
          act_arrival[st + 1][m] = send(op.stage, op.stage + 1, end, in.boundary_bytes[st][m]);
        if (sends_gradient(op.kind) && op.stage > 0)
          grad_arrival[st - 1][m] = send(op.stage, op.stage - 1, end, in.boundary_bytes[st - 1][m]);
        ++next[size_t(k)];
        progress = true;
      }
    }
  }
  for (int k = 0; k < K; ++k)
    if (next[size_t(k)] < int(s.ops[size_t(k)].size())) {
      const Op& op = s.ops[size_t(k)][size_t(next[size_t(k)])];
      throw std::logic_error("simulate_step: the schedule deadlocks: cell " + std::to_string(k) +
                             " waits forever at " + op_letter(op.kind) + "(" + std::to_string(op.micro_batch) +
                             ")" + (S > K ? " of stage " + std::to_string(op.stage) : std::string()));
    }

  for (int k = 0; k < K; ++k) {
    auto& cell = out.cells[size_t(k)];
    cell.ops_end = free_at[size_t(k)];
    cell.reduce_end = cell.ops_end;
    if (in.replicas > 1) {
      double ring_free = 0;
      for (const auto& b : in.buckets[size_t(k)]) {
        const double ready = cell.ops.at(size_t(b.op)).start + b.offset_s;
        const double ns = in.deterministic_reduction ? double(in.allreduce.ring_allgather_ns(b.bytes, in.replicas))
                                                     : double(in.allreduce.ring_allreduce_ns(b.bytes, in.replicas));
        ring_free = std::max(ready, ring_free) + ns * 1e-9;
        cell.reduce_end = std::max(cell.reduce_end, ring_free);
      }
    }
    cell.reduce_exposed = cell.reduce_end - cell.ops_end;
    const double opt = in.optimizer_s.empty() ? 0.0 : in.optimizer_s[size_t(k)];
    cell.busy += opt;
    cell.end = cell.reduce_end + opt;
    out.makespan = std::max(out.makespan, cell.end);
  }
  double idle = 0;
  for (const auto& cell : out.cells) idle += out.makespan - cell.busy - cell.reduce_exposed;
  out.bubble_fraction = out.makespan > 0 ? idle / (double(K) * out.makespan) : 0.0;
  return out;
}

}  // namespace gpipe

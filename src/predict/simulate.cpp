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
    case OpKind::BatchWeights: return 0;  // booked inside each micro-batch's B (predict.cpp), as before the op existed
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
  const int K = s.cells, M = s.micro_batches;
  const auto fail = [](const std::string& what) { throw std::invalid_argument("simulate_step: " + what); };
  if (K < 1 || M < 1 || int(s.ops.size()) != K) fail("the schedule has no cells or micro-batches");
  if (int(in.seconds.size()) != K) fail("seconds must have one entry per cell");
  for (const auto& c : in.seconds)
    if (int(c.size()) != M) fail("seconds[cell] must have one entry per micro-batch");
  if (K > 1 && int(in.boundary_bytes.size()) != K - 1) fail("boundary_bytes must have K-1 entries");
  for (const auto& b : in.boundary_bytes)
    if (int(b.size()) != M) fail("boundary_bytes[b] must have one entry per micro-batch");
  if (!in.optimizer_s.empty() && int(in.optimizer_s.size()) != K) fail("optimizer_s must be empty or per cell");
  if (in.replicas > 1 && int(in.buckets.size()) != K) fail("buckets must have one entry per cell when D > 1");
}

}  // namespace

StepTiming simulate_step(const StepInput& in) {
  check_sizes(in);
  const Schedule& s = in.schedule;
  const int K = s.cells, M = s.micro_batches;
  // [cell][m]: op index of F(m) and of the gradient-sending op (B or I) of m.
  std::vector<std::vector<int>> forward_op(size_t(K), std::vector<int>(size_t(M), -1));
  std::vector<std::vector<int>> gradient_op = forward_op;
  for (int k = 0; k < K; ++k)
    for (int i = 0; i < int(s.ops[size_t(k)].size()); ++i) {
      const Op& op = s.ops[size_t(k)][size_t(i)];
      if (op.kind == OpKind::Forward) forward_op[size_t(k)][size_t(op.micro_batch)] = i;
      if (sends_gradient(op.kind)) gradient_op[size_t(k)][size_t(op.micro_batch)] = i;
    }

  StepTiming out;
  out.cells.resize(size_t(K));
  // [k][m]: arrival of m's activation at cell k (from k-1) and of its
  // gradient at cell k (from k+1); negative: not sent yet.
  std::vector<std::vector<double>> act_arrival(size_t(K), std::vector<double>(size_t(M), -1));
  std::vector<std::vector<double>> grad_arrival = act_arrival;
  std::vector<double> forward_wire(size_t(K), 0), backward_wire(size_t(K), 0);  // [sender]
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
        double ready = free_at[size_t(k)];
        if (op.kind == OpKind::Forward && k > 0) {
          if (act_arrival[size_t(k)][m] < 0) break;
          ready = std::max(ready, act_arrival[size_t(k)][m]);
        }
        if (sends_gradient(op.kind) && k < K - 1) {
          if (grad_arrival[size_t(k)][m] < 0) break;
          ready = std::max(ready, grad_arrival[size_t(k)][m]);
        }
        const double end = ready + in.seconds[size_t(k)][m].of(op.kind);
        cell.ops[size_t(i)] = {ready, end};
        cell.busy += end - ready;
        free_at[size_t(k)] = end;
        if (op.kind == OpKind::Forward && k < K - 1)
          act_arrival[size_t(k + 1)][m] =
              arrival(in.link, forward_wire[size_t(k)], end, in.boundary_bytes[size_t(k)][m]);
        if (sends_gradient(op.kind) && k > 0)
          grad_arrival[size_t(k - 1)][m] =
              arrival(in.link, backward_wire[size_t(k)], end, in.boundary_bytes[size_t(k - 1)][m]);
        ++next[size_t(k)];
        progress = true;
      }
    }
  }
  for (int k = 0; k < K; ++k)
    if (next[size_t(k)] < int(s.ops[size_t(k)].size())) {
      const Op& op = s.ops[size_t(k)][size_t(next[size_t(k)])];
      throw std::logic_error("simulate_step: the schedule deadlocks: cell " + std::to_string(k) +
                             " waits forever at " + op_letter(op.kind) + "(" +
                             std::to_string(op.micro_batch) + ")");
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

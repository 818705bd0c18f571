#include "gpipe/pipeline/buffer_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "gpipe/core/error.hpp"

namespace gpipe {
namespace {

struct Interval {
  int first = -1, last = -1;
};

struct Packing {
  int slots = 0;
  std::vector<int> slot, free_after;
};

// Greedy interval colouring in order of start (ties: input order), lowest
// free slot first: uses exactly the maximum number of overlapping intervals.
Packing pack(const std::vector<Interval>& intervals) {
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return intervals[a].first < intervals[b].first;
  });
  Packing p;
  p.slot.assign(intervals.size(), -1);
  p.free_after.assign(intervals.size(), -1);
  std::vector<int> busy_until;  // per slot: last op of its current occupant
  for (size_t i : order) {
    const Interval& v = intervals[i];
    if (v.first < 0) continue;
    int s = 0;
    while (s < int(busy_until.size()) && busy_until[size_t(s)] >= v.first) ++s;
    if (s == int(busy_until.size())) busy_until.push_back(-1);
    p.slot[i] = s;
    p.free_after[i] = busy_until[size_t(s)];
    busy_until[size_t(s)] = v.last;
  }
  p.slots = int(busy_until.size());
  return p;
}

BufferPool pool(const std::vector<Interval>& intervals) {
  const Packing p = pack(intervals);
  BufferPool b;
  b.slots = p.slots;
  b.slot = p.slot;
  b.free_after = p.free_after;
  for (const Interval& v : intervals) {
    b.first.push_back(v.first);
    b.last.push_back(v.last);
  }
  return b;
}

}  // namespace

CellBufferPlan plan_buffers(const Schedule& schedule, int stage) {
  const int M = schedule.micro_batches;
  // The stage's rank; a hand-written schedule without a stage map is one
  // stage per rank, every op of the rank the stage's.
  const bool mapped = !schedule.rank_of_stage.empty();
  if (mapped && (stage < 0 || stage >= int(schedule.rank_of_stage.size())))
    throw InputError(fmt::format("schedule: stage {} outside 0..{}", stage, int(schedule.rank_of_stage.size()) - 1));
  const int cell = mapped ? schedule.rank_of_stage.at(size_t(stage)) : stage;
  const auto& ops = schedule.ops.at(size_t(cell));
  const auto mine = [&](const Op& op) { return !mapped || op.stage == stage; };
  std::vector<int> forward(size_t(M), -1), recompute(size_t(M), -1), backward(size_t(M), -1),
      weights(size_t(M), -1);
  int batch_weights = -1, weight_group = 1;
  for (int i = 0; i < int(ops.size()); ++i) {
    const Op& op = ops[size_t(i)];
    if (!mine(op)) continue;
    if (op.kind == OpKind::BatchWeights) {
      batch_weights = i;
      continue;
    }
    if (op.count < 1 || op.micro_batch < 0 || op.end() > M || (op.count > 1 && op.kind != OpKind::BackwardWeights))
      throw InputError(fmt::format("schedule: cell {} runs {} ops of micro-batches {}..{} (only a W op covers more "
                                   "than one, all within 0..{})",
                                   cell, op_letter(op.kind), op.micro_batch, op.end() - 1, M - 1));
    for (int q = op.micro_batch; q < op.end(); ++q) {
      const auto m = size_t(q);
      if (op.kind != OpKind::Forward && forward[m] < 0)
        throw InputError(fmt::format("schedule: cell {} runs an op of micro-batch {} before its "
                                     "forward",
                                     cell, q));
      if (op.kind == OpKind::BackwardWeights && backward[m] < 0)
        throw InputError(fmt::format("schedule: cell {} runs the W op of micro-batch {} before its "
                                     "B op",
                                     cell, q));
      switch (op.kind) {
        case OpKind::Forward: forward[m] = i; break;
        case OpKind::Recompute: recompute[m] = i; break;
        case OpKind::Backward:
        case OpKind::BackwardInput: backward[m] = i; break;
        case OpKind::BackwardWeights: weights[m] = i; break;
        case OpKind::BatchWeights: break;
      }
    }
    if (op.kind == OpKind::BackwardWeights) weight_group = std::max(weight_group, op.count);
  }
  // Without re-materialization the whole-batch W reads every micro-batch's
  // kept layer inputs (and received cell input): they live until it.
  const bool batch_reads_kept =
      batch_weights >= 0 && std::none_of(schedule.rematerialized.begin(), schedule.rematerialized.end(),
                                         [](bool r) { return r; });
  std::vector<int> next_backward(size_t(M), -1);  // [m]: the cell's first backward op after B(m)
  for (size_t m = 0; m < size_t(M); ++m) {
    if (backward[m] < 0) continue;
    next_backward[m] = backward[m];
    for (int i = backward[m] + 1; i < int(ops.size()); ++i)
      if (mine(ops[size_t(i)]) &&
          (ops[size_t(i)].kind == OpKind::Backward || ops[size_t(i)].kind == OpKind::BackwardInput)) {
        next_backward[m] = i;
        break;
      }
  }
  std::vector<Interval> whole(static_cast<size_t>(M)), kept, input_grad(static_cast<size_t>(M)),
      weight_grad(static_cast<size_t>(M));
  std::vector<int> backward_item(size_t(M), -1), forward_item(size_t(M), -1);
  for (size_t m = 0; m < size_t(M); ++m) {
    if (forward[m] < 0) continue;
    const int end = std::max({forward[m], backward[m], weights[m], batch_reads_kept ? batch_weights : -1});
    whole[m] = {forward[m], end};
    // The send buffer stays busy until this cell's next backward has run, so
    // consecutive backwards alternate between two buffers and B(m + 1) never
    // waits for B(m)'s gradient to leave (it leaves when the receiver next
    // calls MPI); B(m + 2) reuses B(m)'s buffer, long sent by then.
    if (backward[m] >= 0) input_grad[m] = {backward[m], next_backward[m]};
    if (weights[m] >= 0) weight_grad[m] = {backward[m], weights[m]};
    if (recompute[m] >= 0) {
      forward_item[m] = int(kept.size());
      kept.push_back({forward[m], forward[m]});
      backward_item[m] = int(kept.size());
      kept.push_back({recompute[m], end});
    } else {
      forward_item[m] = backward_item[m] = int(kept.size());
      kept.push_back({forward[m], end});
    }
  }
  CellBufferPlan plan;
  plan.batch_weights = batch_weights;
  plan.weight_group = weight_group;
  plan.micro_batch = pool(whole);
  plan.input_grad = pool(input_grad);
  plan.weight_grad = pool(weight_grad);
  const BufferPool all = pool(kept);
  plan.activations.slots = all.slots;
  plan.forward_slot.assign(size_t(M), -1);
  for (size_t m = 0; m < size_t(M); ++m) {
    const int b = backward_item[m], f = forward_item[m];
    plan.activations.slot.push_back(b < 0 ? -1 : all.slot[size_t(b)]);
    plan.activations.first.push_back(b < 0 ? -1 : all.first[size_t(b)]);
    plan.activations.last.push_back(b < 0 ? -1 : all.last[size_t(b)]);
    plan.activations.free_after.push_back(b < 0 ? -1 : all.free_after[size_t(b)]);
    if (f >= 0) plan.forward_slot[m] = all.slot[size_t(f)];
  }
  return plan;
}

std::int64_t planned_bytes(const CellBufferPlan& plan, const SlotBytes& bytes) {
  return std::int64_t(plan.micro_batch.slots) * bytes.micro_batch +
         std::int64_t(plan.activations.slots) * bytes.activations +
         std::int64_t(plan.input_grad.slots) * bytes.input_grad +
         std::int64_t(plan.weight_grad.slots) * bytes.weight_grad + bytes.fixed +
         (plan.batch_weights >= 0 ? bytes.batch_weights : 0) +
         (plan.weight_group > 1 ? std::int64_t(plan.weight_group) * bytes.weight_group : 0);
}

}  // namespace gpipe

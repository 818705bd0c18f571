// Schedules (1F1B) and the buffer plan, on their own: op lists, slot counts
// (the peak), slot reuse only between disjoint lifetimes, and a simulation
// of K cells' messages that finds every schedule deadlock-free.

#include <gtest/gtest.h>

#include <algorithm>

#include "gpipe/core/error.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {
namespace {

Op F(int m) { return {OpKind::Forward, m}; }
Op B(int m) { return {OpKind::Backward, m}; }
Op R(int m) { return {OpKind::Recompute, m}; }
Op I(int m) { return {OpKind::BackwardInput, m}; }
Op W(int m) { return {OpKind::BackwardWeights, m}; }
// The ops of one-stage-per-rank rank k: each op on stage k.
std::vector<Op> on(int k, std::vector<Op> ops) {
  for (auto& op : ops) op.stage = k;
  return ops;
}

TEST(Schedule, OneFOneBWarmUpSteadyCoolDown) {
  const Schedule s = one_f_one_b(3, 4, Remat::Never);
  EXPECT_EQ(s.ops[0], (std::vector<Op>{F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)}));
  EXPECT_EQ(s.ops[1], on(1, {F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)}));
  EXPECT_EQ(s.ops[2], on(2, {F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)}));
  // M < K: the warm-up is all M forwards.
  EXPECT_EQ(one_f_one_b(4, 2, Remat::Never).ops[0], (std::vector<Op>{F(0), F(1), B(0), B(1)}));
  const Schedule r = one_f_one_b(2, 2, Remat::ExceptLast);
  EXPECT_EQ(r.ops[0], (std::vector<Op>{F(0), F(1), R(0), B(0), B(1)}));
  EXPECT_EQ(r.ops[1], on(1, {F(0), R(0), B(0), F(1), B(1)}));
  EXPECT_EQ(parse_schedule("1f1b", "x"), ScheduleKind::OneFOneB);
  EXPECT_EQ(to_string(ScheduleKind::FillDrain), "fill_drain");
  try {
    parse_schedule("interleaved", "deck.yaml:3: pipeline.schedule");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "deck.yaml:3: pipeline.schedule: unknown schedule 'interleaved' "
                           "(expected fill_drain, 1f1b, zero_bubble or interleaved_1f1b)");
  }
}

// ZB-H1: 1F1B's warm-up, W ops trailing the I ops by k on cell k, the
// cool-down alternating I and W, the remaining W ops at the end.
TEST(Schedule, ZeroBubbleDefersWeightOps) {
  const Schedule s = zero_bubble(3, 4, Remat::Never);
  EXPECT_EQ(s.ops[0], (std::vector<Op>{F(0), F(1), F(2), I(0), W(0), F(3), I(1), W(1), I(2), W(2),
                                       I(3), W(3)}));
  EXPECT_EQ(s.ops[1], on(1, {F(0), F(1), I(0), F(2), I(1), W(0), F(3), I(2), W(1), I(3),
                                       W(2), W(3)}));
  EXPECT_EQ(s.ops[2], on(2, {F(0), I(0), F(1), I(1), F(2), I(2), W(0), F(3), I(3), W(1),
                                       W(2), W(3)}));
  // M < K.
  EXPECT_EQ(zero_bubble(4, 2, Remat::Never).ops[0], (std::vector<Op>{F(0), F(1), I(0), W(0), I(1), W(1)}));
  EXPECT_EQ(zero_bubble(4, 2, Remat::Never).ops[3], on(3, {F(0), I(0), F(1), I(1), W(0), W(1)}));
  const Schedule r = zero_bubble(2, 2, Remat::ExceptLast);
  EXPECT_EQ(r.ops[0], (std::vector<Op>{F(0), F(1), R(0), I(0), W(0), I(1), W(1)}));
  EXPECT_EQ(r.ops[1], on(1, {F(0), R(0), I(0), F(1), I(1), W(0), W(1)}));
  // I and W each in micro-batch order on every cell (1F1B's backward order).
  for (int K = 1; K <= 6; ++K)
    for (int M = 1; M <= 13; ++M)
      for (const auto& ops : zero_bubble(K, M, Remat::Always).ops) {
        int next_i = 0, next_w = 0;
        for (const Op& op : ops) {
          if (op.kind == OpKind::BackwardInput) EXPECT_EQ(op.micro_batch, next_i++);
          if (op.kind == OpKind::BackwardWeights) EXPECT_EQ(op.micro_batch, next_w++);
        }
        EXPECT_EQ(next_i, M);
        EXPECT_EQ(next_w, M);
      }
  EXPECT_EQ(parse_schedule("zero_bubble", "x"), ScheduleKind::ZeroBubble);
  EXPECT_EQ(to_string(ScheduleKind::ZeroBubble), "zero_bubble");
  EXPECT_DOUBLE_EQ(bubble_fraction(ScheduleKind::ZeroBubble, 2, 4), 1.0 / 13);
  EXPECT_DOUBLE_EQ(bubble_fraction(ScheduleKind::OneFOneB, 2, 4), 1.0 / 5);
}

// The zero_bubble plan alone: every cell holds min(M, K) micro-batches from
// F to W (1F1B: min(M, K - k); equal on cell 0), and the kept output
// gradients of cell k live from I to W: min(k + 1, M - w + 1, M) slots,
// w = min(M, K - k - 1) the warm-up.
TEST(BufferPlan, ZeroBubblePeakSlots) {
  for (int K = 1; K <= 6; ++K)
    for (int M = 1; M <= 12; ++M)
      for (int k = 0; k < K; ++k) {
        const auto zb = plan_buffers(zero_bubble(K, M, Remat::Never), k);
        const int w = std::min(M, K - k - 1);
        EXPECT_EQ(zb.micro_batch.slots, std::min(M, K)) << K << " " << M << " " << k;
        EXPECT_EQ(zb.activations.slots, std::min(M, K));
        EXPECT_EQ(zb.input_grad.slots, std::min(M, 2));  // alternating send buffers
        EXPECT_EQ(zb.weight_grad.slots, std::min({k + 1, M - w + 1, M})) << K << " " << M << " " << k;
        if (k == 0)
          EXPECT_EQ(zb.micro_batch.slots, plan_buffers(one_f_one_b(K, M, Remat::Never), 0).micro_batch.slots);
        // Re-materialization: the recomputed activations live from R to W.
        const auto remat = plan_buffers(zero_bubble(K, M, Remat::Always), k);
        EXPECT_EQ(remat.activations.slots, zb.weight_grad.slots) << K << " " << M << " " << k;
        EXPECT_EQ(remat.micro_batch.slots, std::min(M, K));
        EXPECT_EQ(plan_buffers(fill_drain(K, M, Remat::Never), k).weight_grad.slots, 0);
      }
  // Bytes: slots x slot sizes, the kept output gradients included.
  const SlotBytes bytes{1000, 7000, 300, 50, 40};
  EXPECT_EQ(planned_bytes(plan_buffers(zero_bubble(2, 8, Remat::Never), 1), bytes),
            2 * 1000 + 2 * 7000 + 2 * 300 + 50 + 2 * 40);
  EXPECT_EQ(planned_bytes(plan_buffers(zero_bubble(2, 8, Remat::Never), 0), bytes),
            planned_bytes(plan_buffers(one_f_one_b(2, 8, Remat::Never), 0), bytes) + 40);
  Schedule bad = zero_bubble(1, 1, Remat::Never);
  bad.ops[0] = {F(0), W(0), I(0)};
  try {
    plan_buffers(bad, 0);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "schedule: cell 0 runs the W op of micro-batch 0 before its B op");
  }
}

const ScheduleKind kKinds[] = {ScheduleKind::FillDrain, ScheduleKind::OneFOneB,
                               ScheduleKind::ZeroBubble};
const Remat kRemats[] = {Remat::Never, Remat::Always, Remat::ExceptLast};

TEST(BufferPlan, PeakSlots) {
  for (int K = 1; K <= 6; ++K)
    for (int M = 1; M <= 12; ++M)
      for (int k = 0; k < K; ++k) {
        const auto fd = plan_buffers(fill_drain(K, M, Remat::Never), k);
        const auto ofob = plan_buffers(one_f_one_b(K, M, Remat::Never), k);
        EXPECT_EQ(fd.micro_batch.slots, M);
        EXPECT_EQ(fd.activations.slots, M);
        EXPECT_EQ(ofob.micro_batch.slots, std::min(M, K - k)) << K << " " << M << " " << k;
        EXPECT_EQ(ofob.activations.slots, std::min(M, K - k));
        // Two alternating send buffers once a cell runs two backwards.
        EXPECT_EQ(fd.input_grad.slots, std::min(M, 2));
        EXPECT_EQ(ofob.input_grad.slots, std::min(M, 2));
        // Re-materialization: one activation slot, also with except_last (the
        // kept last micro-batch's backward ends before the next recompute).
        EXPECT_EQ(plan_buffers(fill_drain(K, M, Remat::Always), k).activations.slots, 1);
        EXPECT_EQ(plan_buffers(one_f_one_b(K, M, Remat::Always), k).activations.slots, 1);
        EXPECT_EQ(plan_buffers(fill_drain(K, M, Remat::ExceptLast), k).activations.slots, 1);
        EXPECT_EQ(plan_buffers(one_f_one_b(K, M, Remat::Always), k).micro_batch.slots,
                  std::min(M, K - k));
      }
  const auto fwd = plan_buffers(forward_only(3, 5), 1);
  EXPECT_EQ(fwd.micro_batch.slots, 1);
  EXPECT_EQ(fwd.activations.slots, 1);
  EXPECT_EQ(fwd.input_grad.slots, 0);
}

TEST(BufferPlan, PlannedBytesOneFOneBIsKOverMOfFillDrain) {
  const SlotBytes bytes{1000, 7000, 300, 0};
  const int M = 8;
  for (int K = 2; K <= 4; ++K) {
    const auto fd = planned_bytes(plan_buffers(fill_drain(K, M, Remat::Never), 0), {1000, 7000, 0, 0});
    const auto ofob = planned_bytes(plan_buffers(one_f_one_b(K, M, Remat::Never), 0), {1000, 7000, 0, 0});
    EXPECT_EQ(fd, M * 8000);
    EXPECT_EQ(ofob * M, fd * K);
  }
  EXPECT_EQ(planned_bytes(plan_buffers(fill_drain(2, 3, Remat::Always), 1), bytes),
            3 * 1000 + 1 * 7000 + 2 * 300);
}

// Slots are shared only by micro-batches whose lifetimes are disjoint, and a
// slot is free (previous occupant's last op) before its next lifetime starts.
void expect_consistent(const BufferPool& pool, const std::string& what) {
  const size_t M = pool.slot.size();
  for (size_t a = 0; a < M; ++a) {
    if (pool.slot[a] < 0) continue;
    EXPECT_LT(pool.slot[a], pool.slots) << what;
    EXPECT_LE(pool.first[a], pool.last[a]) << what;
    EXPECT_LT(pool.free_after[a], pool.first[a]) << what;
    for (size_t b = 0; b < M; ++b)
      if (a != b && pool.slot[a] == pool.slot[b])
        EXPECT_TRUE(pool.last[a] < pool.first[b] || pool.last[b] < pool.first[a]) << what;
  }
}

TEST(BufferPlan, SlotsNeverOverlap) {
  for (auto kind : kKinds)
    for (auto remat : kRemats)
      for (int K = 1; K <= 5; ++K)
        for (int M = 1; M <= 2 * K + 1; ++M) {
          const Schedule s = make_schedule(kind, K, M, remat);
          for (int k = 0; k < K; ++k) {
            const auto p = plan_buffers(s, k);
            const std::string what = to_string(kind) + " " + to_string(remat) + " K=" +
                                     std::to_string(K) + " M=" + std::to_string(M);
            expect_consistent(p.micro_batch, what);
            expect_consistent(p.activations, what);
            expect_consistent(p.input_grad, what);
            expect_consistent(p.weight_grad, what);
          }
        }
  Schedule bad = fill_drain(1, 2, Remat::Never);
  bad.ops[0] = {B(0), F(0)};
  EXPECT_THROW(plan_buffers(bad, 0), InputError);
}

// Runs the K cells' op lists against the cell runner's message rules:
// a receive is posted when its slot is free (plan free_after), Forward(m)
// needs m's activation from cell k-1 and, to reuse its output slot, the
// previous occupant's send matched by a posted receive on cell k+1;
// Backward(m) (or BackwardInput(m)) likewise with the gradient from cell k+1
// and its input-gradient slot; BackwardWeights needs no message. Returns
// false when no cell can make progress before all are done.
bool runs_to_completion(const Schedule& s) {
  const int K = s.cells, M = s.micro_batches;
  std::vector<CellBufferPlan> plans;
  for (int k = 0; k < K; ++k) plans.push_back(plan_buffers(s, k));
  std::vector<size_t> next(size_t(K), 0);
  std::vector<std::vector<bool>> posted(size_t(K), std::vector<bool>(size_t(M), false));
  std::vector<std::vector<bool>> forwarded = posted, backwarded = posted;
  const auto post = [&](int k, int after) {
    for (int m = 0; m < M; ++m)
      if (plans[size_t(k)].micro_batch.free_after[size_t(m)] == after) posted[size_t(k)][size_t(m)] = true;
  };
  const auto previous = [&](const BufferPool& pool, int m) {  // previous occupant of m's slot
    int best = -1;
    for (int o = 0; o < M; ++o)
      if (pool.slot[size_t(o)] == pool.slot[size_t(m)] && pool.last[size_t(o)] < pool.first[size_t(m)] &&
          (best < 0 || pool.last[size_t(o)] > pool.last[size_t(best)]))
        best = o;
    return best;
  };
  for (int k = 0; k < K; ++k) post(k, -1);
  for (bool progress = true; progress;) {
    progress = false;
    for (int k = 0; k < K; ++k) {
      const auto& ops = s.ops[size_t(k)];
      if (next[size_t(k)] == ops.size()) continue;
      const Op op = ops[next[size_t(k)]];
      const auto m = size_t(op.micro_batch);
      bool ready = true;
      if (op.kind == OpKind::Forward) {
        if (k > 0) ready = posted[size_t(k)][m] && forwarded[size_t(k - 1)][m];
        const int p = previous(plans[size_t(k)].micro_batch, int(m));
        if (k + 1 < K && p >= 0) ready = ready && posted[size_t(k + 1)][size_t(p)];
      } else if (op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput) {
        if (k + 1 < K) ready = posted[size_t(k)][m] && backwarded[size_t(k + 1)][m];
        const int p = previous(plans[size_t(k)].input_grad, int(m));
        if (k > 0 && p >= 0) ready = ready && posted[size_t(k - 1)][size_t(p)];
      }
      if (!ready) continue;
      if (op.kind == OpKind::Forward) forwarded[size_t(k)][m] = true;
      if (op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput) backwarded[size_t(k)][m] = true;
      post(k, int(next[size_t(k)]));
      ++next[size_t(k)];
      progress = true;
    }
  }
  for (int k = 0; k < K; ++k)
    if (next[size_t(k)] != s.ops[size_t(k)].size()) return false;
  return true;
}

TEST(BufferPlan, NoDeadlockForAnyCellsAndMicroBatches) {
  for (int K = 1; K <= 8; ++K)
    for (int M = 1; M <= 2 * K + 1; ++M) {
      for (auto kind : kKinds)
        for (auto remat : kRemats)
          EXPECT_TRUE(runs_to_completion(make_schedule(kind, K, M, remat)))
              << to_string(kind) << " " << to_string(remat) << " K=" << K << " M=" << M;
      EXPECT_TRUE(runs_to_completion(forward_only(K, M))) << "K=" << K << " M=" << M;
    }
  // The simulation does find a deadlock: cell 0 waiting for a gradient
  // before sending the forward cell 1 needs.
  Schedule bad = fill_drain(2, 2, Remat::Never);
  bad.ops[0] = {F(0), B(0), F(1), B(1)};
  bad.ops[1] = {F(0), F(1), B(1), B(0)};
  EXPECT_FALSE(runs_to_completion(bad));
}

}  // namespace
}  // namespace gpipe

#include "gpipe/pipeline/schedule_v.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <stdexcept>

#include "gpipe/core/error.hpp"

namespace gpipe {

std::vector<int> v_stage_map(int cells) {
  std::vector<int> map;
  for (int s = 0; s < 2 * cells; ++s) map.push_back(s < cells ? s : 2 * cells - 1 - s);
  return map;
}

void insert_recomputes(Schedule& schedule) {
  for (auto& ops : schedule.ops) {
    std::vector<Op> out;
    for (const Op& op : ops) {
      if ((op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput) &&
          schedule.rematerialized[size_t(op.micro_batch)])
        out.push_back({OpKind::Recompute, op.micro_batch, op.stage});
      out.push_back(op);
    }
    ops = out;
  }
}

namespace {

std::vector<bool> remat_flags(int micro_batches, Remat remat) {
  std::vector<bool> r(size_t(micro_batches), remat != Remat::Never);
  if (remat == Remat::ExceptLast) r.back() = false;
  return r;
}

}  // namespace

Schedule greedy_zero_bubble(const GreedyInput& in) {
  const int K = in.cells, M = in.micro_batches, S = int(in.rank_of_stage.size());
  if (K < 1 || M < 1 || S < K)
    throw InputError(fmt::format("greedy schedule: expected cells >= 1, micro-batches >= 1 and stages >= cells, "
                                 "got {}, {}, {}",
                                 K, M, S));
  for (const auto* v : {&in.forward, &in.backward_input, &in.backward_weights, &in.activation})
    if (int(v->size()) != S)
      throw InputError(fmt::format("greedy schedule: per-stage times and activations need {} entries, got {}", S,
                                   v->size()));
  if (!in.memory_limit.empty() && int(in.memory_limit.size()) != K)
    throw InputError(fmt::format("greedy schedule: memory_limit needs {} entries (one per rank), got {}", K,
                                 in.memory_limit.size()));
  std::vector<std::vector<int>> stages_of{size_t(K)};
  for (int s = 0; s < S; ++s) {
    const int r = in.rank_of_stage[size_t(s)];
    if (r < 0 || r >= K) throw InputError(fmt::format("greedy schedule: stage {} on rank {} outside 0..{}", s, r, K - 1));
    stages_of[size_t(r)].push_back(s);
  }
  const auto limit = [&](int r) {
    return in.memory_limit.empty() || in.memory_limit[size_t(r)] <= 0 ? std::numeric_limits<double>::infinity()
                                                                       : in.memory_limit[size_t(r)];
  };
  for (int s = 0; s < S; ++s)
    if (in.activation[size_t(s)] > limit(in.rank_of_stage[size_t(s)]))
      throw InputError(fmt::format("greedy schedule: rank {}'s memory limit {} is below one micro-batch of stage {} "
                                   "({})",
                                   in.rank_of_stage[size_t(s)], limit(in.rank_of_stage[size_t(s)]), s,
                                   in.activation[size_t(s)]));

  Schedule out;
  out.cells = K;
  out.stages = S;
  out.micro_batches = M;
  out.rank_of_stage = in.rank_of_stage;
  out.rematerialized.assign(size_t(M), false);
  out.ops.resize(size_t(K));

  const double unknown = -1;
  std::vector<std::vector<double>> end_f(size_t(S), std::vector<double>(size_t(M), unknown)), end_i = end_f;
  std::vector<int> next_f(size_t(S), 0), next_i(size_t(S), 0), in_flight(size_t(S), 0);
  std::vector<std::deque<std::pair<int, int>>> pending_w{size_t(K)};  // (stage, m)
  std::vector<double> t(size_t(K), 0), held(size_t(K), 0);
  std::vector<int> left(size_t(K), 0);
  for (int r = 0; r < K; ++r) left[size_t(r)] = 3 * M * int(stages_of[size_t(r)].size());
  const auto arrival = [&](double end, int from_stage, int to_stage) {
    return end + (in.rank_of_stage[size_t(from_stage)] == in.rank_of_stage[size_t(to_stage)] ? 0.0 : in.message_s);
  };
  // Ready time of the next I / F of stage s (unknown: a dependency not scheduled yet).
  const auto ready_i = [&](int s) {
    const int m = next_i[size_t(s)];
    if (m >= M || end_f[size_t(s)][size_t(m)] < 0) return unknown;
    double ready = end_f[size_t(s)][size_t(m)];
    if (s + 1 < S) {
      if (end_i[size_t(s + 1)][size_t(m)] < 0) return unknown;
      ready = std::max(ready, arrival(end_i[size_t(s + 1)][size_t(m)], s + 1, s));
    }
    return ready;
  };
  const auto ready_f = [&](int s) {
    const int m = next_f[size_t(s)];
    if (m >= M) return unknown;
    if (s == 0) return 0.0;
    if (end_f[size_t(s - 1)][size_t(m)] < 0) return unknown;
    return arrival(end_f[size_t(s - 1)][size_t(m)], s - 1, s);
  };

  while (true) {
    double now = std::numeric_limits<double>::infinity();
    for (int r = 0; r < K; ++r)
      if (left[size_t(r)] > 0) now = std::min(now, t[size_t(r)]);
    if (now == std::numeric_limits<double>::infinity()) break;
    bool any = false;
    double next_event = std::numeric_limits<double>::infinity();
    for (int r = 0; r < K; ++r) {
      if (left[size_t(r)] == 0 || t[size_t(r)] > now) {
        if (left[size_t(r)] > 0) next_event = std::min(next_event, t[size_t(r)]);
        continue;
      }
      auto& ops = out.ops[size_t(r)];
      const auto& mine = stages_of[size_t(r)];
      // Candidates ready now.
      int best_i = -1, best_f = -1;
      double soonest = std::numeric_limits<double>::infinity();  // a known arrival after now
      for (int s : mine) {
        const double ri = ready_i(s);
        if (ri >= 0 && ri <= now) {
          if (best_i < 0 || next_i[size_t(s)] < next_i[size_t(best_i)] ||
              (next_i[size_t(s)] == next_i[size_t(best_i)] && s > best_i))
            best_i = s;
        } else if (ri > now) {
          soonest = std::min(soonest, ri);
        }
        const double rf = ready_f(s);
        // A lower stage leaves room for one micro-batch of every higher stage
        // of this rank that has none in flight and forwards still to run: the
        // way back to the backward (the V's second chunk) can always start,
        // so no memory limit makes the greedy deadlock.
        double reserve = 0;
        for (int h : mine)
          if (h > s && next_f[size_t(h)] < M && in_flight[size_t(h)] == 0) reserve += in.activation[size_t(h)];
        const bool fits = held[size_t(r)] + in.activation[size_t(s)] + reserve <= limit(r);
        if (rf >= 0 && rf <= now && fits) {
          if (best_f < 0 || s > best_f) best_f = s;
        } else if (rf > now && fits) {
          soonest = std::min(soonest, rf);
        }
      }
      Op op{};
      double cost = 0;
      if (best_i >= 0) {
        const int s = best_i, m = next_i[size_t(s)]++;
        op = {OpKind::BackwardInput, m, s};
        cost = in.backward_input[size_t(s)];
        end_i[size_t(s)][size_t(m)] = now + cost;
        pending_w[size_t(r)].push_back({s, m});
      } else if (best_f >= 0) {
        const int s = best_f, m = next_f[size_t(s)]++;
        op = {OpKind::Forward, m, s};
        cost = in.forward[size_t(s)];
        end_f[size_t(s)][size_t(m)] = now + cost;
        held[size_t(r)] += in.activation[size_t(s)];
        ++in_flight[size_t(s)];
      } else if (!pending_w[size_t(r)].empty() &&
                 (!in.w_only_in_gaps ||
                  soonest >= now + in.backward_weights[size_t(pending_w[size_t(r)].front().first)])) {
        const auto [s, m] = pending_w[size_t(r)].front();
        pending_w[size_t(r)].pop_front();
        op = {OpKind::BackwardWeights, m, s};
        cost = in.backward_weights[size_t(s)];
        held[size_t(r)] -= in.activation[size_t(s)];
        --in_flight[size_t(s)];
      } else {
        if (soonest < next_event) next_event = soonest;
        continue;  // waits
      }
      ops.push_back(op);
      --left[size_t(r)];
      // A zero-cost op still moves time forward a little, so a rank never
      // schedules an op in the same instant as a dependency it enabled.
      t[size_t(r)] = now + std::max(cost, 0.0);
      if (cost <= 0) t[size_t(r)] = std::nextafter(now, std::numeric_limits<double>::infinity());
      next_event = std::min(next_event, t[size_t(r)]);
      any = true;
    }
    if (!any) {
      if (next_event == std::numeric_limits<double>::infinity())
        throw std::logic_error("greedy_zero_bubble: no rank can proceed (an inconsistent stage map)");
      for (int r = 0; r < K; ++r)
        if (left[size_t(r)] > 0 && t[size_t(r)] <= now) t[size_t(r)] = next_event;
    }
  }
  return out;
}

namespace {

// ZB-V's own op order (Qi et al. 2024, "Zero Bubble (Almost) Pipeline
// Parallelism", sec. 6, its figure of ZB-V; the same order as
// torch.distributed.pipelining's ScheduleZBVZeroBubble), for M >= 2K - 1.
// Rank r runs chunk 0 = stage r and chunk 1 = stage 2K-1-r:
//   warm-up   2(K-r)-1 x F0;  r x (F1, F0);  K-r x (F1, I1, W1)
//   steady    while chunk 1 has forwards left: [F0 if any left] I0 W0 F1 I1 W1
//   cool-down r x (I0, I1);  K-r x (I0, W0 of the oldest pending);
//             the pending W1, then the pending W0, oldest first.
// Every W follows its own I within two ops in the steady state, so a rank
// holds at most 2K stage micro-batches (1F1B's memory), and each stage's
// F, I and W run in micro-batch order 0..M-1 (1F1B's accumulation order).
Schedule zb_v_pattern(int K, int M) {
  Schedule out;
  out.cells = K;
  out.stages = 2 * K;
  out.micro_batches = M;
  out.rank_of_stage = v_stage_map(K);
  out.rematerialized.assign(size_t(M), false);
  out.ops.resize(size_t(K));
  for (int r = 0; r < K; ++r) {
    auto& ops = out.ops[size_t(r)];
    const int chunk[2] = {r, 2 * K - 1 - r};
    int f[2] = {0, 0}, i[2] = {0, 0}, w[2] = {0, 0};
    const auto F = [&](int c) { ops.push_back({OpKind::Forward, f[c]++, chunk[c]}); };
    const auto I = [&](int c) { ops.push_back({OpKind::BackwardInput, i[c]++, chunk[c]}); };
    const auto W = [&](int c) { ops.push_back({OpKind::BackwardWeights, w[c]++, chunk[c]}); };
    for (int n = 0; n < 2 * (K - r) - 1; ++n) F(0);
    for (int n = 0; n < r; ++n) F(1), F(0);
    for (int n = 0; n < K - r; ++n) F(1), I(1), W(1);
    while (f[1] < M) {
      if (f[0] < M) F(0);
      I(0), W(0), F(1), I(1), W(1);
    }
    for (int n = 0; n < r; ++n) I(0), I(1);
    for (int n = 0; n < K - r; ++n) I(0), W(0);
    while (w[1] < M) W(1);
    while (w[0] < M) W(0);
  }
  return out;
}

}  // namespace

Schedule zb_v(int cells, int micro_batches, Remat remat) {
  if (cells >= 1 && micro_batches >= 2 * cells - 1) {
    Schedule s = zb_v_pattern(cells, micro_batches);
    s.rematerialized = remat_flags(micro_batches, remat);
    insert_recomputes(s);
    return s;
  }
  GreedyInput in;
  in.cells = cells;
  in.micro_batches = micro_batches;
  in.rank_of_stage = v_stage_map(cells);
  const size_t S = in.rank_of_stage.size();
  in.forward.assign(S, 1.0);
  in.backward_input.assign(S, 1.0);
  in.backward_weights.assign(S, 1.0);
  in.activation.assign(S, 1.0);
  in.memory_limit.assign(size_t(cells), 2.0 * cells);
  Schedule s = greedy_zero_bubble(in);
  s.rematerialized = remat_flags(micro_batches, remat);
  insert_recomputes(s);
  return s;
}

Schedule dualpipe_v(int cells, int micro_batches, Remat remat) {
  const int K = cells, M = micro_batches;
  if (M < 2 * K)
    throw InputError(fmt::format("training.micro_batches: dualpipe_v needs at least 2 x cells = {} micro-batches "
                                 "(DualPipeV's warm-up), got {}",
                                 2 * K, M));
  Schedule s;
  s.cells = K;
  s.stages = 2 * K;
  s.micro_batches = M;
  s.rank_of_stage = v_stage_map(K);
  s.rematerialized = remat_flags(M, remat);
  s.ops.resize(size_t(K));
  for (int r = 0; r < K; ++r) {
    auto& ops = s.ops[size_t(r)];
    const int stage[2] = {r, 2 * K - 1 - r};
    int forwards[2] = {0, 0}, backwards[2] = {0, 0};
    std::deque<Op> weights;  // deferred W ops, oldest first
    const auto F = [&](int p) { ops.push_back({OpKind::Forward, forwards[p]++, stage[p]}); };
    const auto B = [&](int p, bool split) {
      const Op op{split ? OpKind::BackwardInput : OpKind::Backward, backwards[p]++, stage[p]};
      ops.push_back(op);
      if (split) weights.push_back({OpKind::BackwardWeights, op.micro_batch, op.stage});
    };
    const auto W = [&]() {
      ops.push_back(weights.front());
      weights.pop_front();
    };
    for (int i = 0; i < 2 * (K - r - 1); ++i) F(0);                    // step 1: nF0
    for (int i = 0; i < r + 1; ++i) F(0), F(1);                        // step 2: nF0F1
    for (int i = 0; i < K - r - 1; ++i) B(1, true), W(), F(1);          // step 3: nB1W1F1
    for (int i = 0; i < M - 2 * K + r + 1; ++i)                         // step 4: nF0B1F1B0
      F(0), B(1, false), F(1), B(0, false);
    for (int i = 0; i < K - r - 1; ++i) B(1, false), F(1), B(0, false);  // step 5: nB1F1B0
    bool split = false;                                                  // step 6: nB1B0
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) split = true;
      B(1, split);
      if (i == (r + 1) / 2 && r % 2 == 0) split = true;
      B(0, split);
    }
    for (int i = 0; i < K - r - 1; ++i) W(), B(0, true);  // step 7: nWB0
    while (!weights.empty()) W();                         // step 8: nW (r + 1 of them)
  }
  insert_recomputes(s);
  return s;
}

double bubble_fraction_v(ScheduleKind kind, int cells, int micro_batches) {
  (void)kind;  // the same formula for both (see their comments)
  const double K = cells, M = micro_batches;
  return (K - 1) / (6 * M + K - 1);
}

}  // namespace gpipe

#include "gpipe/pipeline/schedule_check.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "gpipe/core/error.hpp"

namespace gpipe {

std::string to_string(const Op& op) {
  if (op.count != 1)  // the last in 64 bits: a count read from a file may be any int
    return fmt::format("{}({}..{}) of stage {}", op_letter(op.kind), op.micro_batch,
                       std::int64_t(op.micro_batch) + op.count - 1, op.stage);
  return fmt::format("{}({}) of stage {}", op_letter(op.kind), op.micro_batch, op.stage);
}

namespace {

// Index of an op kind in the checker's position table; -1: a kind the
// checker has no rule for. kG: the whole-batch W (letter G, fill_drain's
// BatchWeights op), at most once per stage, after all of the stage's
// backwards; recorded at micro-batch 0 whatever its micro_batch.
enum Kind { kF, kR, kB, kI, kW, kG, kKinds };
int kind_index(OpKind kind) {
  switch (kind) {
    case OpKind::Forward: return kF;
    case OpKind::Recompute: return kR;
    case OpKind::Backward: return kB;
    case OpKind::BackwardInput: return kI;
    case OpKind::BackwardWeights: return kW;
    default: return op_letter(kind) == 'G' ? kG : -1;
  }
}

OpKind kind_of_index(int index) {
  switch (index) {
    case kF: return OpKind::Forward;
    case kR: return OpKind::Recompute;
    case kB: return OpKind::Backward;
    case kI: return OpKind::BackwardInput;
    case kW: return OpKind::BackwardWeights;
    default:
      for (int k = 0; k < 64; ++k)
        if (op_letter(OpKind(k)) == 'G') return OpKind(k);
      return OpKind::Forward;
  }
}

struct Where {
  int rank = -1, pos = -1;
  bool exists() const { return rank >= 0; }
};

}  // namespace

void check_schedule(const Schedule& s, const std::string& source) {
  const auto fail = [&](const std::string& what) { throw InputError(source + ": " + what); };
  const int K = s.cells, S = s.stages, M = s.micro_batches;
  if (K < 1) fail(fmt::format("cells: expected at least 1 rank, got {}", K));
  if (S < K) fail(fmt::format("stages: expected at least cells = {}, got {}", K, S));
  if (M < 1) fail(fmt::format("micro_batches: expected at least 1, got {}", M));
  if (int(s.rank_of_stage.size()) != S)
    fail(fmt::format("rank_of_stage: expected {} entries (one per stage), got {}", S, s.rank_of_stage.size()));
  // Every table below is sized from K, S and M: each is first bounded by a
  // list the schedule holds (a file's numbers alone allocate nothing).
  if (s.ops.size() != size_t(K))
    fail(fmt::format("ops: expected {} op lists (one per rank), got {}", K, s.ops.size()));
  std::vector<bool> has_stage(size_t(K), false);
  for (int st = 0; st < S; ++st) {
    const int r = s.rank_of_stage[size_t(st)];
    if (r < 0 || r >= K) fail(fmt::format("rank_of_stage[{}]: rank {} outside 0..{}", st, r, K - 1));
    has_stage[size_t(r)] = true;
  }
  for (int r = 0; r < K; ++r)
    if (!has_stage[size_t(r)]) fail(fmt::format("rank_of_stage: rank {} runs no stage", r));
  if (s.rematerialized.size() != size_t(M))
    fail(fmt::format("rematerialized: expected {} entries (one per micro-batch), got {}", M,
                     s.rematerialized.size()));
  // The position table below has kKinds x S x M entries. A schedule that
  // can pass has an F op of its own for every (stage, micro-batch), so S x M
  // is at most its number of ops: checked first, so that the table is
  // bounded by the schedule's own size (a file's numbers alone allocate
  // nothing). The message names the first pair without an F, found among
  // at most op_count + 1 pairs.
  size_t op_count = 0;
  for (const auto& ops : s.ops) op_count += ops.size();
  if (size_t(S) * size_t(M) > op_count) {
    std::set<std::pair<int, int>> forwards;  // (stage, micro-batch) of each F
    for (const auto& ops : s.ops)
      for (const Op& op : ops)
        if (op.kind == OpKind::Forward) forwards.emplace(op.stage, op.micro_batch);
    int st = 0, m = 0;
    while (forwards.count({st, m}))
      if (++m == M) m = 0, ++st;
    fail(fmt::format("stages x micro_batches: {} x {} = {} (stage, micro-batch) pairs, more than the schedule's {} "
                     "ops (the limit: each pair needs an F op of its own); rank {} never runs {}",
                     S, M, std::uint64_t(S) * std::uint64_t(M), op_count, s.rank_of_stage[size_t(st)],
                     to_string(Op{OpKind::Forward, m, st})));
  }
  std::vector<Where> at(size_t(kKinds) * size_t(S) * size_t(M));
  const auto index = [&](int kind, int stage, int m) {
    return (size_t(kind) * size_t(S) + size_t(stage)) * size_t(M) + size_t(m);
  };
  const auto where = [&](int kind, int stage, int m) -> const Where& { return at[index(kind, stage, m)]; };
  bool training = false;

  // One pass in (rank, position) order: ranges, the stage map, duplicates
  // and every same-rank dependency (positions recorded so far are exactly
  // the ops earlier on this rank, or on a lower rank).
  for (int r = 0; r < K; ++r) {
    const auto& ops = s.ops[size_t(r)];
    for (int i = 0; i < int(ops.size()); ++i) {
      const Op& op = ops[size_t(i)];
      const auto bad = [&](const std::string& why) {
        fail(fmt::format("rank {}, op {} ({}): {}", r, i, to_string(op), why));
      };
      const int kind = kind_index(op.kind);
      if (kind < 0) bad("an op kind the checker has no rule for");
      if (op.micro_batch < 0 || op.micro_batch >= M) bad(fmt::format("micro-batch outside 0..{}", M - 1));
      if (op.count != 1 && kind != kW) bad("only a W op covers more than one micro-batch (count)");
      if (op.count < 1 || op.count > M - op.micro_batch)  // micro_batch in [0, M): no overflow
        bad(fmt::format("covers micro-batches {}..{}, outside 0..{}", op.micro_batch,
                        std::int64_t(op.micro_batch) + op.count - 1, M - 1));
      if (op.stage < 0 || op.stage >= S) bad(fmt::format("stage outside 0..{}", S - 1));
      const int st = op.stage;
      if (s.rank_of_stage[size_t(st)] != r)
        bad(fmt::format("the stage map puts stage {} on rank {}", st, s.rank_of_stage[size_t(st)]));
      // A grouped W is checked (and recorded) for each micro-batch it covers.
      for (int m = op.micro_batch; m < op.end(); ++m) {
        const int slot_m = kind == kG ? 0 : m;
        const Where& first = where(kind, st, slot_m);
        if (first.exists())
          bad(fmt::format("runs {}twice (first at rank {}, op {})",
                          op.count > 1 ? fmt::format("micro-batch {} ", m) : std::string(), first.rank, first.pos));
        const auto before = [&](int dep_kind, int dep_stage, const std::string& why) {
          if (!where(dep_kind, dep_stage, m).exists())
            bad(fmt::format("runs before {} {}", to_string(Op{kind_of_index(dep_kind), m, dep_stage}), why));
        };
        switch (kind) {
          case kF:
            if (st > 0 && s.rank_of_stage[size_t(st - 1)] == r)
              before(kF, st - 1, "(its input, on the same rank)");
            break;
          case kR:
            if (!s.rematerialized[size_t(m)]) bad(fmt::format("micro-batch {} is not re-materialized", m));
            before(kF, st, "(the forward it recomputes)");
            break;
          case kB:
          case kI: {
            training = true;
            const int other = kind == kB ? kI : kB;
            if (where(other, st, m).exists())
              bad(fmt::format("stage {} already runs {} of micro-batch {} (a stage runs B, or I and W)", st,
                              other == kB ? "B" : "I", m));
            before(kF, st, "(its own forward)");
            if (s.rematerialized[size_t(m)]) before(kR, st, "(micro-batch re-materialized)");
            if (st + 1 < S && s.rank_of_stage[size_t(st + 1)] == r && !where(kB, st + 1, m).exists())
              before(kI, st + 1, "(its output gradient, on the same rank)");
            break;
          }
          case kW:
            training = true;
            before(kI, st, "(the W of a split backward follows its I)");
            break;
          case kG:
            training = true;
            for (int q = 0; q < M; ++q) {
              // A split backward's W already computes micro-batch q's weight
              // gradient: a G too would add it twice (the checker let it
              // through and the run trained on doubled gradients).
              if (where(kI, st, q).exists())
                bad(fmt::format("stage {} splits the backward of micro-batch {} (I and W): its W computes the "
                                "weight gradient, a whole-batch W (G) would add it again",
                                st, q));
              if (!where(kB, st, q).exists())
                bad(fmt::format("runs before {} (the whole-batch W follows every backward of its stage)",
                                to_string(Op{OpKind::Backward, q, st})));
            }
            break;
          default: break;
        }
        at[index(kind, st, slot_m)] = {r, i};
      }
    }
  }

  // Completeness.
  for (int st = 0; st < S; ++st)
    for (int m = 0; m < M; ++m) {
      const int r = s.rank_of_stage[size_t(st)];
      const auto missing = [&](OpKind kind) {
        fail(fmt::format("rank {} never runs {}", r, to_string(Op{kind, m, st})));
      };
      if (!where(kF, st, m).exists()) missing(OpKind::Forward);
      if (!training) continue;
      if (!where(kB, st, m).exists() && !where(kI, st, m).exists()) missing(OpKind::Backward);
      if (where(kI, st, m).exists() && !where(kW, st, m).exists()) missing(OpKind::BackwardWeights);
    }

  // Deadlock: run every rank's list in order; a receiving op waits for its
  // sender (which the completeness pass guarantees exists).
  std::vector<bool> done(at.size(), false);
  std::vector<int> next(size_t(K), 0);
  const auto dependency = [&](const Op& op) -> int {  // index into `at`/`done`, -1: none
    const int kind = kind_index(op.kind);
    if (kind == kF && op.stage > 0) return int(index(kF, op.stage - 1, op.micro_batch));
    if ((kind == kB || kind == kI) && op.stage + 1 < S) {
      const int b = where(kB, op.stage + 1, op.micro_batch).exists() ? kB : kI;
      return int(index(b, op.stage + 1, op.micro_batch));
    }
    return -1;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < K; ++r) {
      const auto& ops = s.ops[size_t(r)];
      while (next[size_t(r)] < int(ops.size())) {
        const Op& op = ops[size_t(next[size_t(r)])];
        const int dep = dependency(op);
        if (dep >= 0 && !done[size_t(dep)]) break;
        const int kind = kind_index(op.kind);
        for (int m = op.micro_batch; m < op.end(); ++m) done[index(kind, op.stage, kind == kG ? 0 : m)] = true;
        ++next[size_t(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < K; ++r) {
    const auto& ops = s.ops[size_t(r)];
    if (next[size_t(r)] == int(ops.size())) continue;
    const int i = next[size_t(r)];
    const Op& op = ops[size_t(i)];
    const int dep = dependency(op);
    const size_t per_kind = size_t(S) * size_t(M);
    const Op wanted{kind_of_index(int(size_t(dep) / per_kind)), int(size_t(dep) % size_t(M)),
                    int(size_t(dep) % per_kind / size_t(M))};
    const Where& w = at[size_t(dep)];
    const int stuck = next[size_t(w.rank)];
    fail(fmt::format("rank {}, op {} ({}): deadlock: waits for {} on rank {} (op {}), which is stuck at op {} ({})",
                     r, i, to_string(op), to_string(wanted), w.rank, w.pos, stuck,
                     to_string(s.ops[size_t(w.rank)][size_t(stuck)])));
  }
}

}  // namespace gpipe

#include "gpipe/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpipe/core/error.hpp"
#include "gpipe/pipeline/schedule_v.hpp"

namespace gpipe {

Remat parse_remat(const std::string& text, const std::string& field) {
  if (text == "never") return Remat::Never;
  if (text == "always") return Remat::Always;
  if (text == "except_last") return Remat::ExceptLast;
  throw InputError(fmt::format("{}: unknown re-materialization mode '{}' (expected never, "
                               "always or except_last)",
                               field, text));
}

std::string to_string(Remat remat) {
  switch (remat) {
    case Remat::Never: return "never";
    case Remat::Always: return "always";
    case Remat::ExceptLast: return "except_last";
  }
  return "?";
}

ScheduleKind parse_schedule(const std::string& text, const std::string& field) {
  if (text == "fill_drain") return ScheduleKind::FillDrain;
  if (text == "1f1b") return ScheduleKind::OneFOneB;
  if (text == "zero_bubble") return ScheduleKind::ZeroBubble;
  if (text == "interleaved_1f1b") return ScheduleKind::Interleaved1F1B;
  if (text == "zb_v") return ScheduleKind::ZbV;
  if (text == "dualpipe_v") return ScheduleKind::DualPipeV;
  throw InputError(fmt::format("{}: unknown schedule '{}' (expected fill_drain, 1f1b, zero_bubble, "
                               "interleaved_1f1b, zb_v or dualpipe_v)",
                               field, text));
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::FillDrain: return "fill_drain";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::ZeroBubble: return "zero_bubble";
    case ScheduleKind::Interleaved1F1B: return "interleaved_1f1b";
    case ScheduleKind::ZbV: return "zb_v";
    case ScheduleKind::DualPipeV: return "dualpipe_v";
  }
  return "?";
}

char op_letter(OpKind kind) {
  switch (kind) {
    case OpKind::Forward: return 'F';
    case OpKind::Recompute: return 'R';
    case OpKind::Backward: return 'B';
    case OpKind::BackwardInput: return 'I';
    case OpKind::BackwardWeights: return 'W';
    case OpKind::BatchWeights: return 'G';
  }
  return '?';
}

namespace {
std::vector<bool> rematerialized(int micro_batches, Remat remat) {
  std::vector<bool> r(size_t(micro_batches), remat != Remat::Never);
  if (remat == Remat::ExceptLast) r.back() = false;
  return r;
}
}  // namespace

namespace {
// A schedule of `cells` empty op lists.
Schedule blank(int cells, int micro_batches, Remat remat) {
  Schedule s;
  s.cells = cells;
  s.stages = cells;
  s.micro_batches = micro_batches;
  for (int k = 0; k < cells; ++k) s.rank_of_stage.push_back(k);
  s.rematerialized = rematerialized(micro_batches, remat);
  s.ops.resize(size_t(cells));
  return s;
}

// Appends Recompute(m) when m is re-materialized, then the backward op `kind` of m.
void push_backward(const Schedule& s, std::vector<Op>& ops, OpKind kind, int m, int stage) {
  if (s.rematerialized[size_t(m)]) ops.push_back({OpKind::Recompute, m, stage});
  ops.push_back({kind, m, stage});
}
}  // namespace

Schedule fill_drain(int cells, int micro_batches, Remat remat) {
  Schedule s = blank(cells, micro_batches, remat);
  for (int k = 0; k < cells; ++k) {
    auto& ops = s.ops[size_t(k)];
    for (int m = 0; m < micro_batches; ++m) ops.push_back({OpKind::Forward, m, k});
    for (int m = micro_batches - 1; m >= 0; --m) push_backward(s, ops, OpKind::Backward, m, k);
    if (micro_batches > 1) ops.push_back({OpKind::BatchWeights, 0, k});
  }
  return s;
}

Schedule one_f_one_b(int cells, int micro_batches, Remat remat) {
  Schedule s = blank(cells, micro_batches, remat);
  for (int k = 0; k < cells; ++k) {
    auto& ops = s.ops[size_t(k)];
    const int warm_up = std::min(micro_batches, cells - k - 1);
    for (int m = 0; m < warm_up; ++m) ops.push_back({OpKind::Forward, m, k});
    for (int m = warm_up; m < micro_batches; ++m) {
      ops.push_back({OpKind::Forward, m, k});
      push_backward(s, ops, OpKind::Backward, m - warm_up, k);
    }
    for (int m = micro_batches - warm_up; m < micro_batches; ++m) push_backward(s, ops, OpKind::Backward, m, k);
  }
  return s;
}

Schedule zero_bubble(int cells, int micro_batches, Remat remat) {
  Schedule s = blank(cells, micro_batches, remat);
  for (int k = 0; k < cells; ++k) {
    auto& ops = s.ops[size_t(k)];
    int weights = 0;  // next micro-batch whose W op is due
    const auto weight = [&]() { ops.push_back({OpKind::BackwardWeights, weights++, k}); };
    const int warm_up = std::min(micro_batches, cells - k - 1);
    const int lag = k;  // ZB-H1: cell k's W ops trail its I ops by k micro-batches
    for (int m = 0; m < warm_up; ++m) ops.push_back({OpKind::Forward, m, k});
    for (int m = warm_up; m < micro_batches; ++m) {
      ops.push_back({OpKind::Forward, m, k});
      push_backward(s, ops, OpKind::BackwardInput, m - warm_up, k);
      if (m - warm_up >= lag) weight();
    }
    for (int m = micro_batches - warm_up; m < micro_batches; ++m) {
      push_backward(s, ops, OpKind::BackwardInput, m, k);
      weight();  // the cool-down: I and W alternate
    }
    while (weights < micro_batches) weight();
  }
  return s;
}

Schedule interleaved_one_f_one_b(int cells, int chunks, int micro_batches, Remat remat) {
  if (chunks < 1)
    throw InputError(fmt::format("pipeline.chunks: {} chunks per rank, expected at least 1", chunks));
  if (chunks == 1) return one_f_one_b(cells, micro_batches, remat);
  const int K = cells, v = chunks, M = micro_batches;
  if (M % K != 0)
    throw InputError(fmt::format("training.micro_batches: interleaved_1f1b with pipeline.chunks = {} needs a "
                                 "multiple of the {} pipeline cells, not {}",
                                 v, K, M));
  Schedule s = blank(K, M, remat);
  s.stages = K * v;
  s.rank_of_stage.clear();
  for (int st = 0; st < K * v; ++st) s.rank_of_stage.push_back(st % K);
  const int total = M * v;  // virtual micro-batches per rank
  // Megatron-LM: virtual micro-batch j is micro-batch (j / Kv) K + j mod K
  // of chunk (j / K) mod v (backwards: chunk v - 1 - that).
  const auto micro = [&](int j) { return (j / (K * v)) * K + j % K; };
  const auto chunk = [&](int j, bool forward) {
    const int c = (j % (K * v)) / K;
    return forward ? c : v - 1 - c;
  };
  for (int k = 0; k < K; ++k) {
    auto& ops = s.ops[size_t(k)];
    const auto forward = [&](int j) { ops.push_back({OpKind::Forward, micro(j), chunk(j, true) * K + k}); };
    const auto backward = [&](int j) { push_backward(s, ops, OpKind::Backward, micro(j), chunk(j, false) * K + k); };
    const int warm_up = M == K ? total : std::min(total, (K - k - 1) * 2 + (v - 1) * K);
    for (int j = 0; j < warm_up; ++j) forward(j);
    for (int i = 0; i < total - warm_up; ++i) {
      forward(i + warm_up);
      backward(i);
    }
    for (int j = total - warm_up; j < total; ++j) backward(j);
  }
  return s;
}

double bubble_fraction(ScheduleKind kind, int cells, int micro_batches, int chunks) {
  if (kind == ScheduleKind::ZbV || kind == ScheduleKind::DualPipeV) return bubble_fraction_v(kind, cells, micro_batches);
  int work = kind == ScheduleKind::ZeroBubble ? 3 * micro_batches : micro_batches;
  if (kind == ScheduleKind::Interleaved1F1B) work *= chunks;
  return double(cells - 1) / double(work + cells - 1);
}

Schedule make_schedule(ScheduleKind kind, int cells, int micro_batches, Remat remat, int chunks) {
  if (chunks != 1 && kind != ScheduleKind::Interleaved1F1B)
    throw InputError(fmt::format("pipeline.chunks: {} chunks per rank need pipeline.schedule: interleaved_1f1b "
                                 "(pipeline.schedule {} runs {})",
                                 chunks, to_string(kind),
                                 kind == ScheduleKind::ZbV || kind == ScheduleKind::DualPipeV
                                     ? "two stages per rank in a V, fixed by the schedule"
                                     : "one stage per rank"));
  switch (kind) {
    case ScheduleKind::FillDrain: return fill_drain(cells, micro_batches, remat);
    case ScheduleKind::OneFOneB: return one_f_one_b(cells, micro_batches, remat);
    case ScheduleKind::ZeroBubble: return zero_bubble(cells, micro_batches, remat);
    case ScheduleKind::Interleaved1F1B: return interleaved_one_f_one_b(cells, chunks, micro_batches, remat);
    case ScheduleKind::ZbV: return zb_v(cells, micro_batches, remat);
    case ScheduleKind::DualPipeV: return dualpipe_v(cells, micro_batches, remat);
  }
  return fill_drain(cells, micro_batches, remat);
}

Schedule make_schedule(ScheduleKind kind, int cells, int micro_batches, Remat remat, int chunks, int w_group) {
  const bool has_w = kind == ScheduleKind::ZeroBubble || kind == ScheduleKind::ZbV || kind == ScheduleKind::DualPipeV;
  if (w_group != 1 && w_group >= 1 && !has_w)  // name the deck's schedule (group_weights sees only ops)
    throw InputError(fmt::format("pipeline.w_group: {} needs a schedule with W ops (zero_bubble, zb_v or "
                                 "dualpipe_v); pipeline.schedule {} has none{}",
                                 w_group, to_string(kind),
                                 kind == ScheduleKind::FillDrain ? " (fill_drain's whole-batch W is one GEMM already)"
                                                                 : ""));
  return group_weights(make_schedule(kind, cells, micro_batches, remat, chunks), w_group);
}

Schedule group_weights(const Schedule& schedule, int group) {
  if (group < 1) throw InputError(fmt::format("pipeline.w_group: {} micro-batches per W op, expected at least 1", group));
  if (group == 1) return schedule;
  Schedule out = schedule;
  bool any = false;
  for (size_t r = 0; r < schedule.ops.size(); ++r) {
    const auto& ops = schedule.ops[r];
    // [stage]: the open group (its first micro-batch and count), -1: none.
    std::vector<int> first(size_t(schedule.stages), -1), count(size_t(schedule.stages), 0);
    std::vector<bool> keep(ops.size(), true);
    std::vector<Op> merged(ops.size());
    // [stage]: position of its last W (a group closes there at the latest).
    std::vector<int> last_w(size_t(schedule.stages), -1);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == OpKind::BackwardWeights) last_w[size_t(ops[i].stage)] = int(i);
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind != OpKind::BackwardWeights) continue;
      any = true;
      const auto st = size_t(op.stage);
      keep[i] = false;  // folded into its group's op
      if (first[st] < 0) first[st] = op.micro_batch, count[st] = 0;
      count[st] += op.count;
      // Close here when the group is full, at the stage's last W, or when its
      // next W (in list order) does not continue it.
      bool close = count[st] >= group || int(i) == last_w[st];
      if (!close)
        for (size_t j = i + 1; j < ops.size(); ++j)
          if (ops[j].kind == OpKind::BackwardWeights && ops[j].stage == op.stage) {
            close = ops[j].micro_batch != first[st] + count[st] || count[st] + ops[j].count > group;
            break;
          }
      if (close) {
        keep[i] = true;
        merged[i] = {OpKind::BackwardWeights, first[st], op.stage, count[st]};
        first[st] = -1;
      }
    }
    auto& list = out.ops[r];
    list.clear();
    for (size_t i = 0; i < ops.size(); ++i)
      if (keep[i]) list.push_back(ops[i].kind == OpKind::BackwardWeights ? merged[i] : ops[i]);
  }
  if (!any)
    throw InputError(fmt::format("pipeline.w_group: {} needs a schedule with W ops (zero_bubble, zb_v, dualpipe_v "
                                 "or a schedule file with W ops); this one has none (fill_drain's whole-batch W "
                                 "is one GEMM already)",
                                 group));
  return out;
}

Schedule forward_only(const Schedule& training, int micro_batches) {
  Schedule s = blank(training.cells, micro_batches, Remat::Never);
  s.stages = training.stages;
  s.rank_of_stage = training.rank_of_stage;
  for (int k = 0; k < s.cells; ++k) {
    const auto mine = stages_of_rank(s, k);
    for (int m = 0; m < micro_batches; ++m)
      for (int st : mine) s.ops[size_t(k)].push_back({OpKind::Forward, m, st});
  }
  return s;
}

std::vector<int> stages_of_rank(const Schedule& schedule, int rank) {
  std::vector<int> out;
  for (int st = 0; st < int(schedule.rank_of_stage.size()); ++st)
    if (schedule.rank_of_stage[size_t(st)] == rank) out.push_back(st);
  return out;
}

Schedule forward_only(int cells, int micro_batches) {
  Schedule s = blank(cells, micro_batches, Remat::Never);
  for (int k = 0; k < cells; ++k)
    for (int m = 0; m < micro_batches; ++m) s.ops[size_t(k)].push_back({OpKind::Forward, m, k});
  return s;
}

}  // namespace gpipe

#include "gpipe/predict/tune.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "gpipe/core/error.hpp"
#include "gpipe/pipeline/schedule_v.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {

std::int64_t peak_activation_bytes(const Schedule& schedule, const std::vector<std::int64_t>& activation_bytes,
                                   int rank) {
  const auto& ops = schedule.ops.at(size_t(rank));
  std::map<std::pair<int, int>, int> last;  // (stage, m) -> index of its last op
  for (int i = 0; i < int(ops.size()); ++i)
    for (int m = ops[size_t(i)].micro_batch; m < ops[size_t(i)].end(); ++m) last[{ops[size_t(i)].stage, m}] = i;
  std::int64_t held = 0, peak = 0;
  for (int i = 0; i < int(ops.size()); ++i) {
    const Op& op = ops[size_t(i)];
    const std::int64_t a = activation_bytes.at(size_t(op.stage));
    if (op.kind == OpKind::Forward) peak = std::max(peak, held += a);
    if (op.kind != OpKind::Forward)
      for (int m = op.micro_batch; m < op.end(); ++m)  // a grouped W frees each micro-batch it covers
        if (last[{op.stage, m}] == i) held -= a;
  }
  return peak;
}

TuneResult tune(const Deck& deck, int ranks, const PredictOptions& options, int in_flight) {
  if (in_flight < 1) throw InputError(fmt::format("--tune-in-flight: expected at least 1, got {}", in_flight));
  const GridShape grid = grid_shape(deck, ranks);
  const int K = grid.cells, M = deck.training.micro_batches, L = int(deck.model.layers.size());
  TuneResult out;

  // pipeline.w_group: every candidate's W ops grouped as the deck's own
  // schedule's are (group_weights, after planning), and priced as grouped
  // (step_input of the grouped list: the stacked layers' W over the group's rows).
  const int group = deck.pipeline.w_group;
  const auto evaluate = [&](const std::string& name, const Schedule& planned, const StepInput& base,
                            const std::vector<std::int64_t>& limit) {
    const Schedule s = group_weights(planned, group);
    StepInput in = group == 1 ? base : step_input(deck, ranks, options, s);
    in.schedule = s;
    TuneCandidate c;
    c.name = name;
    const StepTiming t = simulate_step(in);
    c.step_s = t.makespan;
    c.bubble = t.bubble_fraction;
    for (int r = 0; r < K; ++r)
      if (peak_activation_bytes(s, base.activation_bytes, r) > limit[size_t(r)]) c.fits = false;
    c.schedule = s;
    c.limit_bytes = limit;
    c.activation_bytes = base.activation_bytes;
    out.candidates.push_back(c);
  };
  const auto limits = [&](const StepInput& base, const Schedule& s) {
    std::vector<std::int64_t> limit(size_t(K), 0);
    for (int st = 0; st < s.stages; ++st)
      limit[size_t(s.rank_of_stage[size_t(st)])] += std::int64_t(in_flight) * base.activation_bytes[size_t(st)];
    return limit;
  };
  const auto greedy = [&](const StepInput& base, const std::vector<int>& map, const std::vector<std::int64_t>& limit,
                          bool gaps, bool messages) {
    GreedyInput g;
    g.cells = K;
    g.micro_batches = M;
    g.rank_of_stage = map;
    for (size_t st = 0; st < map.size(); ++st) {
      const OpSeconds& t = base.seconds[st][0];
      g.forward.push_back(t.forward);
      g.backward_input.push_back(t.backward_input);
      g.backward_weights.push_back(t.backward_weights);
      g.activation.push_back(double(base.activation_bytes[st]));
    }
    for (const auto l : limit) g.memory_limit.push_back(double(l));
    double bytes = 0;
    int n = 0;
    for (const auto& b : base.boundary_bytes)
      for (const auto v : b) bytes += double(v), ++n;
    g.message_s = !messages ? 0.0
                            : base.link.latency_s +
                                  (n > 0 ? double(base.link.transmit_ns(std::int64_t(bytes / n))) * 1e-9 : 0.0);
    g.w_only_in_gaps = gaps;
    return greedy_zero_bubble(g);
  };

  // One stage per rank: ZB-H1 and the greedy.
  const Schedule h1 = zero_bubble(K, M, Remat::Never);
  const StepInput flat = step_input(deck, ranks, options, h1);
  out.limit_bytes = limits(flat, h1);
  evaluate("zero_bubble (ZB-H1)", h1, flat, out.limit_bytes);
  out.zb_h1_step_s = out.candidates.front().step_s;
  std::vector<int> identity;
  for (int k = 0; k < K; ++k) identity.push_back(k);
  const auto label = [](const std::string& map, bool gaps, bool messages) {
    return "greedy" + map + ", W " + (gaps ? "only in gaps" : "fills gaps") + (messages ? "" : ", planned w/o msgs");
  };
  for (const bool messages : {true, false})
    for (const bool gaps : {false, true})
      evaluate(label("", gaps, messages), greedy(flat, identity, out.limit_bytes, gaps, messages), flat,
               out.limit_bytes);
  // Two stages per rank in a V.
  if (L >= 2 * K) {
    const Schedule v = zb_v(K, M, Remat::Never);
    const StepInput vin = step_input(deck, ranks, options, v);
    const auto vlimit = limits(vin, v);
    // ZB-V's own order (M >= 2K - 1; below, zb_v is the greedy with unit
    // times): fixed, so it keeps a W between most arrivals and their use.
    evaluate(M >= 2 * K - 1 ? "zb_v (ZB-V)" : "zb_v (greedy, unit times)", v, vin, vlimit);
    for (const bool messages : {true, false})
      for (const bool gaps : {false, true})
        evaluate(label(" V", gaps, messages), greedy(vin, v.rank_of_stage, vlimit, gaps, messages), vin, vlimit);
  }
  for (int i = 0; i < int(out.candidates.size()); ++i) {
    const auto& c = out.candidates[size_t(i)];
    if (c.fits && (out.best < 0 || c.step_s < out.candidates[size_t(out.best)].step_s)) out.best = i;
  }
  return out;
}

std::string tune_w_group_note(const Deck& deck) {
  const int group = deck.pipeline.w_group;
  if (group == 1) return "";
  return fmt::format("pipeline.w_group = {}: every candidate's W ops are grouped {} micro-batches at a time, as the "
                     "deck's own schedule's would be (the written file holds the grouped W ops)",
                     group, group);
}

}  // namespace gpipe

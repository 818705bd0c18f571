#include "gpipe/predict/trace_times.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "../io/hdf5_handle.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/pipeline/schedule_v.hpp"
#include "gpipe/pipeline/trace.hpp"
#include "gpipe/predict/simulate.hpp"

namespace gpipe {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  std::int64_t step;
  std::int8_t kind;
  std::int32_t micro_batch;
  double start, end;
};

}  // namespace

TraceTimes read_trace_times(const std::string& path) {
  h5::silence_errors();
  const h5::Handle f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid()) throw InputError(fmt::format("{}: cannot open the trace (not an HDF5 file, or missing)", path));
  const auto fail = [&](const std::string& what) { throw InputError(fmt::format("{}: {}", path, what)); };
  if (!h5::has_attribute(f.get(), "cells") || !h5::has_attribute(f.get(), "micro_batches"))
    fail("not a gpipe trace (no cells or micro_batches attribute)");
  TraceTimes t;
  t.cells = int(h5::read_int_attribute(f.get(), "cells"));
  t.micro_batches = int(h5::read_int_attribute(f.get(), "micro_batches"));
  if (h5::has_attribute(f.get(), "schedule")) t.schedule = h5::read_string_attribute(f.get(), "schedule");
  if (h5::has_attribute(f.get(), "replicas") && h5::read_int_attribute(f.get(), "replicas") != 1)
    fail("--tune-trace needs a trace of one replica (D = 1)");
  // One stage per cell: the V schedules run two on every cell (their events
  // mix both stages' times); interleaved_1f1b and schedule files are checked
  // per event below (a micro-batch's forward twice in one step).
  if (t.schedule == "zb_v" || t.schedule == "dualpipe_v")
    fail(fmt::format("--tune-trace takes a trace of one stage per cell (fill_drain, 1f1b, zero_bubble); this trace "
                     "ran {}, two stages per cell",
                     t.schedule));
  const bool stage_check = t.schedule != "fill_drain" && t.schedule != "1f1b" && t.schedule != "zero_bubble";
  for (int r = 0; r < t.cells; ++r) {
    const std::string name = fmt::format("/rank_{:04d}/events", r);
    const h5::Handle d = h5::dataset(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT));
    if (!d.valid()) fail(fmt::format("{} is missing", name));
    const h5::Handle file_type = h5::datatype(H5Dget_type(d.get()));
    const int kind_member = H5Tget_member_index(file_type.get(), "kind");
    if (kind_member < 0) fail(fmt::format("{} has no kind field", name));
    const h5::Handle kind_type = h5::datatype(H5Tget_member_type(file_type.get(), unsigned(kind_member)));
    const h5::Handle kind_native = h5::datatype(H5Tget_native_type(kind_type.get(), H5T_DIR_ASCEND));
    const h5::Handle mem = h5::datatype(H5Tcreate(H5T_COMPOUND, sizeof(Row)));
    H5Tinsert(mem.get(), "step", HOFFSET(Row, step), H5T_NATIVE_INT64);
    H5Tinsert(mem.get(), "kind", HOFFSET(Row, kind), kind_native.get());
    if (H5Tget_member_index(file_type.get(), "micro_batch") >= 0)
      H5Tinsert(mem.get(), "micro_batch", HOFFSET(Row, micro_batch), H5T_NATIVE_INT32);
    H5Tinsert(mem.get(), "start", HOFFSET(Row, start), H5T_NATIVE_DOUBLE);
    H5Tinsert(mem.get(), "end", HOFFSET(Row, end), H5T_NATIVE_DOUBLE);
    const h5::Handle space = h5::dataspace(H5Dget_space(d.get()));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    std::vector<Row> rows(size_t(std::max<hssize_t>(n, 0)), Row{0, 0, -1, 0, 0});
    if (n > 0 && H5Dread(d.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
      fail(fmt::format("cannot read {}", name));
    std::set<std::int64_t> steps;
    for (const Row& e : rows) steps.insert(e.step);
    const bool skip_first = steps.size() > 1;
    const std::int64_t first = steps.empty() ? 0 : *steps.begin();
    // A W event may cover several micro-batches: a grouped W (pipeline.w_group,
    // Op::count) or fill_drain's whole-batch W (one per stage and step). Each
    // micro-batch of each of the rank's stages has one forward event, so a
    // step's forwards / W events is the micro-batches one W covers (w_group;
    // M for a whole-batch W; 1 ungrouped), and a W event's time per
    // micro-batch is its duration over that.
    std::map<std::int64_t, std::pair<int, int>> per_step;  // step -> (forwards, W events)
    for (const Row& e : rows) {
      if (EventKind(e.kind) == EventKind::Forward) ++per_step[e.step].first;
      if (EventKind(e.kind) == EventKind::BackwardWeights) ++per_step[e.step].second;
    }
    // The times tuned from must be measured ones: a non-finite or negative
    // duration (a corrupt or hand-made trace) would give a NaN or a
    // nonsensical step and a schedule "tuned" from it.
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& e = rows[i];
      const EventKind k = EventKind(e.kind);
      if (k != EventKind::Forward && k != EventKind::Backward && k != EventKind::BackwardInput &&
          k != EventKind::BackwardWeights)
        continue;
      if (!std::isfinite(e.start) || !std::isfinite(e.end) || e.end < e.start)
        fail(fmt::format("{}[{}] ({} of step {}, micro-batch {}): start {} and end {} are not a finite interval "
                         "(end >= start); --tune-trace tunes from measured times only",
                         name, i, region_name(k), e.step, e.micro_batch, e.start, e.end));
    }
    std::vector<double> f_, i_, b_, w_;
    std::set<std::pair<std::int64_t, std::int32_t>> seen_forwards;  // (step, micro-batch) of every F
    for (const Row& e : rows) {
      if (skip_first && e.step == first) continue;
      if (stage_check && EventKind(e.kind) == EventKind::Forward && e.micro_batch >= 0 &&
          !seen_forwards.insert({e.step, e.micro_batch}).second)
        fail(fmt::format("rank {} runs the forward of micro-batch {} twice in step {} (several stages per cell; "
                         "schedule {}): --tune-trace takes a trace of one stage per cell (fill_drain, 1f1b, "
                         "zero_bubble)",
                         r, e.micro_batch, e.step, t.schedule));
      const double s = e.end - e.start;
      switch (EventKind(e.kind)) {
        case EventKind::Forward: f_.push_back(s); break;
        case EventKind::BackwardInput: i_.push_back(s); break;
        case EventKind::Backward: b_.push_back(s); break;
        case EventKind::BackwardWeights: {
          const auto& [forwards, weights] = per_step[e.step];
          w_.push_back(forwards > weights ? s * double(weights) / double(forwards) : s);
          break;
        }
        default: break;
      }
    }
    if (f_.empty() || (i_.empty() && b_.empty())) fail(fmt::format("rank {} has no forward or backward event", r));
    t.forward.push_back(median(f_));
    t.backward_input.push_back(i_.empty() ? median(b_) : median(i_));
    t.backward_weights.push_back(w_.empty() ? 0.0 : median(w_));  // per micro-batch (above)
  }
  return t;
}

TuneResult tune_times(const TraceTimes& times, int M, int in_flight, double message_s, int w_group) {
  if (in_flight < 1) throw InputError(fmt::format("--tune-in-flight: expected at least 1, got {}", in_flight));
  const int K = times.cells;
  StepInput base;
  base.link = LinkModel{message_s, 0};
  base.boundary_bytes.assign(size_t(std::max(K - 1, 0)), std::vector<std::int64_t>(size_t(M), 0));
  for (int k = 0; k < K; ++k) {
    OpSeconds s;
    s.forward = times.forward[size_t(k)];
    s.backward_input = times.backward_input[size_t(k)];
    s.backward_weights = times.backward_weights[size_t(k)];
    s.backward = s.backward_input + s.backward_weights;
    base.seconds.push_back(std::vector<OpSeconds>(size_t(M), s));
    base.activation_bytes.push_back(1);
  }
  TuneResult out;
  out.limit_bytes.assign(size_t(K), in_flight);
  const auto evaluate = [&](const std::string& name, const Schedule& planned) {
    const Schedule s = group_weights(planned, w_group);  // a grouped W: the sum of its micro-batches' W times
    StepInput in = base;
    in.schedule = s;
    const StepTiming t = simulate_step(in);
    TuneCandidate c;
    c.name = name;
    c.step_s = t.makespan;
    c.bubble = t.bubble_fraction;
    c.limit_bytes = out.limit_bytes;
    c.activation_bytes = base.activation_bytes;
    for (int r = 0; r < K; ++r)
      if (peak_activation_bytes(s, base.activation_bytes, r) > out.limit_bytes[size_t(r)]) c.fits = false;
    c.schedule = s;
    out.candidates.push_back(c);
  };
  evaluate("zero_bubble (ZB-H1)", zero_bubble(K, M, Remat::Never));
  out.zb_h1_step_s = out.candidates.front().step_s;
  for (const bool messages : {true, false})
    for (const bool gaps : {false, true}) {
      GreedyInput g;
      g.cells = K;
      g.micro_batches = M;
      for (int k = 0; k < K; ++k) g.rank_of_stage.push_back(k);
      g.forward = times.forward;
      g.backward_input = times.backward_input;
      g.backward_weights = times.backward_weights;
      g.activation.assign(size_t(K), 1.0);
      g.memory_limit.assign(size_t(K), double(in_flight));
      g.message_s = messages ? message_s : 0.0;
      g.w_only_in_gaps = gaps;
      evaluate(std::string("greedy, W ") + (gaps ? "only in gaps" : "fills gaps") +
                   (messages ? "" : ", planned w/o msgs"),
               greedy_zero_bubble(g));
    }
  for (int i = 0; i < int(out.candidates.size()); ++i) {
    const auto& c = out.candidates[size_t(i)];
    if (c.fits && (out.best < 0 || c.step_s < out.candidates[size_t(out.best)].step_s)) out.best = i;
  }
  return out;
}

}  // namespace gpipe

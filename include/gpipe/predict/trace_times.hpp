#pragma once
// Per-stage op times measured by a gpipe-train trace (docs/file-formats.md,
// "Traces"), for gpipe-plan --tune --tune-trace: the median forward,
// input-gradient (or fused backward) and weight-gradient event of each cell.

#include <string>
#include <vector>

#include "gpipe/predict/tune.hpp"

namespace gpipe {

struct TraceTimes {
  int cells = 0, micro_batches = 0;
  std::string schedule;                  ///< the traced run's pipeline.schedule
  std::vector<double> forward;           ///< [cell] median F event, seconds
  std::vector<double> backward_input;    ///< [cell] median I event (fused B: B, with W = 0)
  std::vector<double> backward_weights;  ///< [cell] median W event (0 without W events)
};

/// Reads `path` (one replica: D = 1) and takes, per rank = cell, the median
/// duration of its forward (kind 0), backward_input (9) or else fused
/// backward (1), and backward_weights (10) events over every traced step
/// but the first when there are more (the warm-up). A W event that covers
/// several micro-batches (grouped W, pipeline.w_group; fill_drain's
/// whole-batch W) counts per micro-batch: its duration x the step's W
/// events / the step's forward events on that rank (one forward per
/// micro-batch and stage), i.e. / w_group (/ M for a whole-batch W; an
/// uneven last group is averaged in). Throws InputError naming `path` when
/// it is not a gpipe trace, has D > 1, ran several stages per cell (zb_v,
/// dualpipe_v, or a micro-batch's forward twice in one step:
/// interleaved_1f1b with chunks > 1, a V-shaped schedule file), a cell
/// has no forward or backward event, or a forward, backward or W event's
/// start or end is not finite or ends before it starts (naming the event).
TraceTimes read_trace_times(const std::string& path);

/// --tune on measured times: ZB-H1 and greedy_zero_bubble (one stage per
/// cell, both W policies) simulated with `times` (the same for every
/// micro-batch), messages of `message_s`, no optimizer, activation 1 per
/// stage micro-batch and a limit of `in_flight` per rank; the best that
/// fits. With `w_group` > 1 (the deck's pipeline.w_group) every candidate's
/// W ops are grouped by group_weights after planning, a grouped W taking
/// the sum of its micro-batches' W times (the trace's per-micro-batch W,
/// read_trace_times). Throws InputError for in_flight < 1, and as
/// group_weights does for w_group < 1.
TuneResult tune_times(const TraceTimes& times, int micro_batches, int in_flight, double message_s,
                      int w_group = 1);

}  // namespace gpipe

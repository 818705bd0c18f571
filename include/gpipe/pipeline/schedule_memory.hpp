#pragma once
// Activation memory of multi-stage schedules: the buffer plan of one stage
// (a rank running two or more stages keeps one plan per stage) and the peak
// number of stage micro-batches a rank holds at once (docs/design.md,
// "Schedules"). Pure functions of the schedule.

#include <vector>

#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// The buffer plan of stage `stage` (global index): plan_buffers over that
/// stage's ops alone, in the order its rank runs them, with every op index
/// (first, last, free_after) mapped back into the rank's whole op list, so a
/// runner posts a stage's receives after the right op of its rank. With one
/// stage per rank this is plan_buffers(schedule, stage). Throws InputError as
/// plan_buffers does (naming the stage's rank), and for a stage outside
/// 0..stages-1.
CellBufferPlan plan_stage_buffers(const Schedule& schedule, int stage);

/// [stage]: micro_batch slots of plan_stage_buffers (stage micro-batches in
/// flight, from F(m) to m's last op), the count the activation bytes scale
/// with.
std::vector<int> stage_slots(const Schedule& schedule);

/// The most stage micro-batches `rank` holds at once: over the rank's op
/// list, the largest number of (stage, m) whose F has run and whose last op
/// (B, or W of a split backward) has not yet ended. A lower bound on the sum
/// of its stages' stage_slots (separate pools per stage cannot share).
int peak_held(const Schedule& schedule, int rank);

}  // namespace gpipe

#pragma once
// Activation memory of multi-stage schedules: each stage's micro_batch
// slots (a rank running two or more stages keeps one plan per stage,
// plan_buffers(schedule, stage)) and the peak number of stage micro-batches
// a rank holds at once (docs/design.md, "Schedules"). Pure functions of the
// schedule.

#include <vector>

#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// [stage]: micro_batch slots of plan_buffers(schedule, stage) (stage micro-batches in
/// flight, from F(m) to m's last op), the count the activation bytes scale
/// with.
std::vector<int> stage_slots(const Schedule& schedule);

/// The most stage micro-batches `rank` holds at once: over the rank's op
/// list, the largest number of (stage, m) whose F has run and whose last op
/// (B, or W of a split backward, or the grouped W covering m) has not yet ended. A lower bound on the sum
/// of its stages' stage_slots (separate pools per stage cannot share).
int peak_held(const Schedule& schedule, int rank);

}  // namespace gpipe

#include "gpipe/pipeline/schedule_memory.hpp"

#include <fmt/format.h>

#include <map>

#include "gpipe/core/error.hpp"

namespace gpipe {

CellBufferPlan plan_stage_buffers(const Schedule& schedule, int stage) {
  if (stage < 0 || stage >= schedule.stages || stage >= int(schedule.rank_of_stage.size()))
    throw InputError(fmt::format("schedule: stage {} outside 0..{}", stage, schedule.stages - 1));
  const int rank = schedule.rank_of_stage[size_t(stage)];
  Schedule one;
  one.cells = 1;
  one.stages = 1;
  one.micro_batches = schedule.micro_batches;
  one.rank_of_stage = {0};
  one.rematerialized = schedule.rematerialized;
  one.ops.resize(1);
  std::vector<int> position;  // [i in the stage's list]: index in the rank's list
  const auto& ops = schedule.ops.at(size_t(rank));
  for (int i = 0; i < int(ops.size()); ++i)
    if (ops[size_t(i)].stage == stage) {
      one.ops[0].push_back({ops[size_t(i)].kind, ops[size_t(i)].micro_batch, 0});
      position.push_back(i);
    }
  CellBufferPlan plan;
  try {
    plan = plan_buffers(one, 0);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{} (stage {} on rank {})", e.what(), stage, rank));
  }
  const auto map = [&](std::vector<int>& indices) {
    for (int& i : indices)
      if (i >= 0) i = position[size_t(i)];
  };
  for (BufferPool* pool : {&plan.micro_batch, &plan.activations, &plan.input_grad, &plan.weight_grad}) {
    map(pool->first);
    map(pool->last);
    map(pool->free_after);
  }
  return plan;
}

std::vector<int> stage_slots(const Schedule& schedule) {
  std::vector<int> out;
  for (int s = 0; s < schedule.stages; ++s) out.push_back(plan_stage_buffers(schedule, s).micro_batch.slots);
  return out;
}

int peak_held(const Schedule& schedule, int rank) {
  const auto& ops = schedule.ops.at(size_t(rank));
  std::map<std::pair<int, int>, int> last;  // (stage, m) -> its last op
  for (int i = 0; i < int(ops.size()); ++i) last[{ops[size_t(i)].stage, ops[size_t(i)].micro_batch}] = i;
  int held = 0, peak = 0;
  for (int i = 0; i < int(ops.size()); ++i) {
    const Op& op = ops[size_t(i)];
    if (op.kind == OpKind::Forward) peak = std::max(peak, ++held);
    if (last[{op.stage, op.micro_batch}] == i && op.kind != OpKind::Forward) --held;
  }
  return peak;
}

}  // namespace gpipe

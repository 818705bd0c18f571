#include "gpipe/pipeline/schedule_memory.hpp"

#include <algorithm>
#include <map>

namespace gpipe {

std::vector<int> stage_slots(const Schedule& schedule) {
  std::vector<int> out;
  for (int s = 0; s < schedule.stages; ++s) out.push_back(plan_buffers(schedule, s).micro_batch.slots);
  return out;
}

int peak_held(const Schedule& schedule, int rank) {
  const auto& ops = schedule.ops.at(size_t(rank));
  std::map<std::pair<int, int>, int> last;  // (stage, m) -> its last op
  for (int i = 0; i < int(ops.size()); ++i)
    for (int m = ops[size_t(i)].micro_batch; m < ops[size_t(i)].end(); ++m) last[{ops[size_t(i)].stage, m}] = i;
  int held = 0, peak = 0;
  for (int i = 0; i < int(ops.size()); ++i) {
    const Op& op = ops[size_t(i)];
    if (op.kind == OpKind::Forward) peak = std::max(peak, ++held);
    if (op.kind != OpKind::Forward)
      for (int m = op.micro_batch; m < op.end(); ++m)
        if (last[{op.stage, m}] == i) --held;
  }
  return peak;
}

}  // namespace gpipe

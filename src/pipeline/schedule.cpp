#include "gpipe/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpipe/core/error.hpp"

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
  throw InputError(fmt::format("{}: unknown schedule '{}' (expected fill_drain or 1f1b)", field, text));
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::FillDrain: return "fill_drain";
    case ScheduleKind::OneFOneB: return "1f1b";
  }
  return "?";
}

namespace {
std::vector<bool> rematerialized(int micro_batches, Remat remat) {
  std::vector<bool> r(size_t(micro_batches), remat != Remat::Never);
  if (remat == Remat::ExceptLast) r.back() = false;
  return r;
}
}  // namespace

Schedule fill_drain(int cells, int micro_batches, Remat remat) {
  Schedule s;
  s.cells = cells;
  s.micro_batches = micro_batches;
  s.rematerialized = rematerialized(micro_batches, remat);
  std::vector<Op> ops;
  for (int m = 0; m < micro_batches; ++m) ops.push_back({OpKind::Forward, m});
  for (int m = micro_batches - 1; m >= 0; --m) {
    if (s.rematerialized[size_t(m)]) ops.push_back({OpKind::Recompute, m});
    ops.push_back({OpKind::Backward, m});
  }
  s.ops.assign(size_t(cells), ops);
  return s;
}

Schedule one_f_one_b(int cells, int micro_batches, Remat remat) {
  Schedule s;
  s.cells = cells;
  s.micro_batches = micro_batches;
  s.rematerialized = rematerialized(micro_batches, remat);
  s.ops.resize(size_t(cells));
  for (int k = 0; k < cells; ++k) {
    auto& ops = s.ops[size_t(k)];
    const auto backward = [&](int m) {
      if (s.rematerialized[size_t(m)]) ops.push_back({OpKind::Recompute, m});
      ops.push_back({OpKind::Backward, m});
    };
    const int warm_up = std::min(micro_batches, cells - k - 1);
    for (int m = 0; m < warm_up; ++m) ops.push_back({OpKind::Forward, m});
    for (int m = warm_up; m < micro_batches; ++m) {
      ops.push_back({OpKind::Forward, m});
      backward(m - warm_up);
    }
    for (int m = micro_batches - warm_up; m < micro_batches; ++m) backward(m);
  }
  return s;
}

Schedule make_schedule(ScheduleKind kind, int cells, int micro_batches, Remat remat) {
  switch (kind) {
    case ScheduleKind::FillDrain: return fill_drain(cells, micro_batches, remat);
    case ScheduleKind::OneFOneB: return one_f_one_b(cells, micro_batches, remat);
  }
  return fill_drain(cells, micro_batches, remat);
}

Schedule forward_only(int cells, int micro_batches) {
  Schedule s;
  s.cells = cells;
  s.micro_batches = micro_batches;
  s.rematerialized.assign(size_t(micro_batches), false);
  std::vector<Op> ops;
  for (int m = 0; m < micro_batches; ++m) ops.push_back({OpKind::Forward, m});
  s.ops.assign(size_t(cells), ops);
  return s;
}

}  // namespace gpipe

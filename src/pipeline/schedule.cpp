#include "gpipe/pipeline/schedule.hpp"

#include <fmt/format.h>

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

Schedule fill_drain(int cells, int micro_batches, Remat remat) {
  Schedule s;
  s.cells = cells;
  s.micro_batches = micro_batches;
  s.rematerialized.assign(size_t(micro_batches), remat != Remat::Never);
  if (remat == Remat::ExceptLast) s.rematerialized.back() = false;
  std::vector<Op> ops;
  for (int m = 0; m < micro_batches; ++m) ops.push_back({OpKind::Forward, m});
  for (int m = micro_batches - 1; m >= 0; --m) {
    if (s.rematerialized[size_t(m)]) ops.push_back({OpKind::Recompute, m});
    ops.push_back({OpKind::Backward, m});
  }
  s.ops.assign(size_t(cells), ops);
  return s;
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

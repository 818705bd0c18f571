#include "gpipe/pipeline/micro_batch.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"

namespace gpipe {

std::vector<MicroBatch> split_batch(std::int64_t batch, int micro_batches) {
  require(micro_batches >= 1,
          fmt::format("training.micro_batches: expected at least 1, got {}", micro_batches));
  require(batch >= micro_batches,
          fmt::format("training.micro_batches: {} micro-batches cannot split a batch of {} "
                      "samples (need micro_batches <= batch)",
                      micro_batches, batch));
  std::vector<MicroBatch> out(static_cast<size_t>(micro_batches));
  const std::int64_t base = batch / micro_batches, extra = batch % micro_batches;
  std::int64_t offset = 0;
  for (int m = 0; m < micro_batches; ++m) {
    out[size_t(m)] = {offset, base + (m < extra ? 1 : 0)};
    offset += out[size_t(m)].size;
  }
  return out;
}

bool slot_rows_stacked(const std::vector<MicroBatch>& split, const std::vector<int>& slot, int m, int count,
                       std::int64_t capacity) {
  if (count < 1 || m < 0 || size_t(m + count) > split.size() || size_t(m + count) > slot.size()) return false;
  for (int q = m; q < m + count; ++q) {
    if (slot[size_t(q)] < 0 || slot[size_t(q)] != slot[size_t(m)] + (q - m)) return false;
    if (q + 1 < m + count && split[size_t(q)].size != capacity) return false;
    if (split[size_t(q)].size > capacity) return false;
  }
  return true;
}

double bubble_fraction(int cells, int micro_batches) {
  return double(cells - 1) / double(micro_batches + cells - 1);
}

}  // namespace gpipe

#pragma once
// Splitting a mini-batch into micro-batches (GPipe sec. 2.2).

#include <cstdint>
#include <vector>

namespace gpipe {

/// Rows [offset, offset + size) of a mini-batch.
struct MicroBatch {
  std::int64_t offset = 0;
  std::int64_t size = 0;
};

/// Splits `batch` samples into `micro_batches` contiguous micro-batches whose
/// sizes differ by at most one (the first batch % micro_batches are one
/// larger). Throws InputError unless 1 <= micro_batches <= batch.
std::vector<MicroBatch> split_batch(std::int64_t batch, int micro_batches);

/// Whether micro-batches m .. m + count - 1 of `split`, held in buffer slots
/// `slot[m..]` of `capacity` rows each carved from one allocation (slot s at
/// row s x capacity), are one run of consecutive rows there: consecutive
/// slots slot[m], slot[m] + 1, ..., and every member but the last full
/// (capacity rows). Then a grouped W reads the group's stacked rows in place
/// (docs/design.md, "Grouped W"). False for an empty range or a slot < 0.
bool slot_rows_stacked(const std::vector<MicroBatch>& split, const std::vector<int>& slot, int m, int count,
                       std::int64_t capacity);

/// Bubble fraction of a fill-drain step with balanced cells: (K-1)/(M+K-1).
double bubble_fraction(int cells, int micro_batches);

}  // namespace gpipe

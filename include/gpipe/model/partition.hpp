#pragma once
// Partitioning a Sequential model of L layers into K contiguous cells.

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

/// Layer counts per cell, in order; they sum to L and are all >= 1.
struct Partition {
  std::vector<int> counts;
  int cells() const { return int(counts.size()); }
  /// Index of the first layer of `cell`.
  int first_layer(int cell) const;
  /// Cost of each cell given per-layer costs.
  std::vector<double> cell_costs(const std::vector<double>& layer_costs) const;
  /// max / mean of cell_costs (1 = perfectly balanced).
  double imbalance(const std::vector<double>& layer_costs) const;
};

/// Contiguous partition of `layer_costs` (size L) into `cells` parts that
/// minimizes the largest part's cost (exact dynamic programme, O(K L^2)).
/// Ties prefer earlier cuts. Throws InputError if cells < 1 or cells > L.
Partition balance_min_max(const std::vector<double>& layer_costs, int cells);

/// Checks an explicit list of layer counts against L and K; throws
/// InputError("pipeline.balance: ...") if the list has the wrong length,
/// does not sum to L, or has an empty (<= 0) cell.
Partition explicit_partition(const std::vector<int>& counts, int layers, int cells);

}  // namespace gpipe

#include "gpipe/model/partition.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "gpipe/core/error.hpp"

namespace gpipe {

int Partition::first_layer(int cell) const {
  return std::accumulate(counts.begin(), counts.begin() + cell, 0);
}

std::vector<double> Partition::cell_costs(const std::vector<double>& layer_costs) const {
  std::vector<double> out;
  size_t l = 0;
  for (int c : counts) {
    double sum = 0;
    for (int i = 0; i < c; ++i) sum += layer_costs.at(l++);
    out.push_back(sum);
  }
  return out;
}

double Partition::imbalance(const std::vector<double>& layer_costs) const {
  const auto costs = cell_costs(layer_costs);
  const double mean = std::accumulate(costs.begin(), costs.end(), 0.0) / double(costs.size());
  const double max = *std::max_element(costs.begin(), costs.end());
  return mean > 0 ? max / mean : 1.0;
}

namespace {
void check_cells(int layers, int cells) {
  require(cells >= 1, fmt::format("pipeline: expected at least 1 cell, got {}", cells));
  require(cells <= layers,
          fmt::format("pipeline: {} cells (MPI ranks) but the model has only {} layers; every "
                      "cell needs at least one layer (run with at most {} ranks)",
                      cells, layers, layers));
}
}  // namespace

Partition balance_min_max(const std::vector<double>& layer_costs, int cells) {
  const int L = int(layer_costs.size());
  check_cells(L, cells);
  std::vector<double> prefix(size_t(L) + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + layer_costs[size_t(i)];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: minimal max-cost of splitting the first i layers into k cells.
  std::vector<std::vector<double>> best(size_t(cells) + 1, std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(cells) + 1, std::vector<int>(size_t(L) + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= cells; ++k)
    for (int i = k; i <= L - (cells - k); ++i)
      for (int j = k - 1; j < i; ++j) {
        const double cost = std::max(best[size_t(k) - 1][size_t(j)], prefix[size_t(i)] - prefix[size_t(j)]);
        if (cost < best[size_t(k)][size_t(i)]) {
          best[size_t(k)][size_t(i)] = cost;
          cut[size_t(k)][size_t(i)] = j;
        }
      }
  Partition p;
  p.counts.assign(size_t(cells), 0);
  int i = L;
  for (int k = cells; k >= 1; --k) {
    const int j = cut[size_t(k)][size_t(i)];
    p.counts[size_t(k) - 1] = i - j;
    i = j;
  }
  return p;
}

Partition explicit_partition(const std::vector<int>& counts, int layers, int cells) {
  check_cells(layers, cells);
  require(int(counts.size()) == cells,
          fmt::format("pipeline.balance: the list has {} entries but the pipeline has {} cells "
                      "(MPI ranks); give one layer count per cell",
                      counts.size(), cells));
  for (size_t c = 0; c < counts.size(); ++c)
    require(counts[c] >= 1, fmt::format("pipeline.balance: cell {} would be empty ({} layers); "
                                        "every cell needs at least one layer",
                                        c, counts[c]));
  const int sum = std::accumulate(counts.begin(), counts.end(), 0);
  require(sum == layers, fmt::format("pipeline.balance: the layer counts sum to {} but the model "
                                     "has {} layers",
                                     sum, layers));
  return Partition{counts};
}

}  // namespace gpipe

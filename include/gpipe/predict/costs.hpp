#pragma once
// Per-layer op times for the performance model (docs/performance-model.md):
// exact for `synthetic` layers (their deck keys), measured (a calibration
// file), or FLOPs divided by a GEMM rate that depends on the micro-batch rows.
// Pure: no MPI, no Kokkos.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpipe/io/costs_file.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/model/layer_seconds.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe {

/// GFLOP/s as a function of micro-batch rows (small micro-batches run GEMMs
/// slower): points (rows, GFLOP/s) with rows ascending, interpolated linearly
/// in log2(rows), constant beyond the first and last point.
struct RateCurve {
  std::vector<std::pair<double, double>> points;
  /// GFLOP/s at `rows` (> 0). Throws std::logic_error when there are no points.
  double gflops(double rows) const;
  /// "50" (a constant rate) or "ROWS:GFLOPS,ROWS:GFLOPS,..." (rows ascending,
  /// positive). Throws InputError naming `field`.
  static RateCurve parse(const std::string& text, const std::string& field);
  /// "32:38,256:80" form of the points.
  std::string str() const;
};

/// The rate curve measured on the development machine (float Dense
/// layers, perf/gpipe_bench_dense; docs/performance-model.md).
RateCurve default_rate_curve();

/// A `synthetic` layer's deck keys (the emulated layer): microseconds per
/// sample of the forward, the input-gradient and the weight-gradient parts
/// of its backward (backward_input_us and backward_weights_us default to
/// forward_us), and its parameter count.
struct SyntheticKeys {
  double forward_us = 0;
  double backward_input_us = 0;
  double backward_weights_us = 0;
  std::int64_t params = 0;
};

/// [layer]: the keys of every `type: synthetic` layer of the deck's
/// model.layers (layers/synthetic.hpp's SyntheticConfig, as the registry
/// parsed them); absent for other types.
std::vector<std::optional<SyntheticKeys>> synthetic_layers(const Deck& deck);

/// Measured seconds per (layer index, micro-batch rows), from a calibration
/// file (io/costs_file.hpp).
using MeasuredCosts = std::map<std::pair<int, std::int64_t>, LayerSeconds>;

/// The measured costs of `table` (read from `path`) for `deck`. Throws
/// InputError naming `path` when the table's layer types or precision are
/// not the deck's.
MeasuredCosts measured_costs(const CostsTable& table, const Deck& deck, const std::string& path);

/// Where gpipe-plan takes each layer's times from, in this order: its
/// synthetic keys (exact: rows x microseconds per sample), measured entries
/// of the layer (at `rows`; linear between the nearest measured rows; the
/// nearest scaled by the rows ratio outside them), else FLOPs / rate(rows).
struct CostSource {
  std::vector<std::optional<SyntheticKeys>> synthetic;  ///< [layer] (may be shorter: none)
  MeasuredCosts measured;
  RateCurve rate = default_rate_curve();

  /// Times of `layer` (from model_shapes) for a micro-batch of `rows`.
  /// FLOPs split (f1 = FLOPs with the input gradient, f0 = without): I =
  /// f1 - f0 (0 for the model's first layer, which computes none); for a
  /// layer with parameters F = f1 / 3 (a GEMM layer's forward : backward
  /// = 2 : 4) and W = f0 - F; for one without, F = f0, W = 0.
  LayerSeconds seconds(const LayerShape& layer, std::int64_t rows) const;
  /// "synthetic", "measured" or "flops" for `layer` at `rows`.
  std::string origin(const LayerShape& layer, std::int64_t rows) const;
};

}  // namespace gpipe

#include "gpipe/predict/costs.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "gpipe/core/error.hpp"
#include "gpipe/layers/synthetic.hpp"

namespace gpipe {

double RateCurve::gflops(double rows) const {
  if (points.empty()) throw std::logic_error("RateCurve: no points");
  if (rows <= points.front().first) return points.front().second;
  if (rows >= points.back().first) return points.back().second;
  for (size_t i = 1; i < points.size(); ++i)
    if (rows <= points[i].first) {
      const auto [r0, g0] = points[i - 1];
      const auto [r1, g1] = points[i];
      const double t = (std::log2(rows) - std::log2(r0)) / (std::log2(r1) - std::log2(r0));
      return g0 + t * (g1 - g0);
    }
  return points.back().second;
}

RateCurve RateCurve::parse(const std::string& text, const std::string& field) {
  const auto fail = [&] {
    throw InputError(fmt::format("{}: expected a GFLOP/s number > 0 or ROWS:GFLOPS,... with rows "
                                 "ascending and both > 0, got '{}'",
                                 field, text));
  };
  const auto number = [&](const std::string& s) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      fail();
    }
    if (used != s.size() || !(v > 0) || !std::isfinite(v)) fail();
    return v;
  };
  RateCurve curve;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      if (text.find(',') != std::string::npos) fail();
      curve.points.push_back({1.0, number(item)});
      continue;
    }
    const double rows = number(item.substr(0, colon)), rate = number(item.substr(colon + 1));
    if (!curve.points.empty() && rows <= curve.points.back().first) fail();
    curve.points.push_back({rows, rate});
  }
  if (curve.points.empty()) fail();
  return curve;
}

std::string RateCurve::str() const {
  std::string s;
  for (const auto& [rows, rate] : points) s += fmt::format("{}{:g}:{:g}", s.empty() ? "" : ",", rows, rate);
  return s;
}

RateCurve default_rate_curve() {
  // Float Dense forward + backward GFLOP/s of a 1024 x 1024 layer against
  // micro-batch rows, perf/gpipe_bench_dense DenseStepRows (median of 5
  // repetitions) on the development machine, 2026-11-30, measured while other
  // builds ran at nice 19 (docs/performance-model.md, "GEMM efficiency").
  return RateCurve{{{1, 4.3}, {2, 8.4}, {4, 22.8}, {8, 32.5}, {16, 53.1}, {32, 49.8}, {64, 53.5},
                    {128, 71.8}, {256, 72.6}, {512, 73.6}}};
}

std::vector<std::optional<SyntheticKeys>> synthetic_layers(const Deck& deck) {
  std::vector<std::optional<SyntheticKeys>> out(deck.model.layers.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const LayerSpec& spec = deck.model.layers[i];
    if (spec.type != "synthetic") continue;
    const auto& c = spec.as<SyntheticConfig>();  // validated by the registry entry's parser
    out[i] = SyntheticKeys{c.forward_us, c.backward_input_us, c.backward_weights_us, c.params};
  }
  return out;
}

MeasuredCosts measured_costs(const CostsTable& table, const Deck& deck, const std::string& path) {
  std::vector<std::string> types;
  for (const auto& layer : deck.model.layers) types.push_back(layer.type);
  if (table.layer_types != types)
    throw InputError(fmt::format("{}: measured for another model ({} layers from {}), not {}'s {} layers", path,
                                 table.layer_types.size(), table.deck, deck.path, types.size()));
  if (table.precision != deck.precision)
    throw InputError(fmt::format("{}: measured in precision {}, the deck runs {}", path, table.precision,
                                 deck.precision));
  MeasuredCosts out;
  for (const auto& r : table.rows)
    out[{int(r.layer), r.rows}] = {r.forward_s, r.backward_input_s, r.backward_weights_s};
  return out;
}

namespace {

LayerSeconds scaled(const LayerSeconds& s, double f) {
  return {s.forward * f, s.backward_input * f, s.backward_weights * f};
}

// Measured seconds of `layer` at `rows`: exact, linear between the nearest
// measured rows, or the nearest scaled by rows / its rows outside them.
std::optional<LayerSeconds> measured_at(const MeasuredCosts& m, int layer, std::int64_t rows) {
  const auto hi = m.lower_bound({layer, rows});
  const bool has_hi = hi != m.end() && hi->first.first == layer;
  if (has_hi && hi->first.second == rows) return hi->second;
  const bool has_lo = hi != m.begin() && std::prev(hi)->first.first == layer;
  if (!has_hi && !has_lo) return std::nullopt;
  if (has_hi && has_lo) {
    const auto lo = std::prev(hi);
    const double r0 = double(lo->first.second), r1 = double(hi->first.second);
    const double t = (double(rows) - r0) / (r1 - r0);
    const auto a = lo->second, b = hi->second;
    return LayerSeconds{a.forward + t * (b.forward - a.forward),
                        a.backward_input + t * (b.backward_input - a.backward_input),
                        a.backward_weights + t * (b.backward_weights - a.backward_weights)};
  }
  const auto& near = has_hi ? *hi : *std::prev(hi);
  return scaled(near.second, double(rows) / double(near.first.second));
}

}  // namespace

std::string CostSource::origin(const LayerShape& layer, std::int64_t rows) const {
  const auto l = size_t(layer.index);
  if (l < synthetic.size() && synthetic[l]) return "synthetic";
  if (measured_at(measured, int(layer.index), rows)) return "measured";
  return "flops";
}

LayerSeconds CostSource::seconds(const LayerShape& layer, std::int64_t rows) const {
  const auto l = size_t(layer.index);
  if (l < synthetic.size() && synthetic[l]) {
    const auto& k = *synthetic[l];
    const double r = double(rows) * 1e-6;
    return {k.forward_us * r, k.backward_input_us * r, k.backward_weights_us * r};
  }
  if (const auto m = measured_at(measured, int(layer.index), rows)) return *m;
  const double per_s = rate.gflops(double(rows)) * 1e9;
  const bool first = layer.index == 0;
  const double without_input = layer.flops(rows, false);
  const double input = first ? 0.0 : layer.flops(rows, true) - without_input;
  LayerSeconds s;
  if (layer.parameter_count() > 0) {
    // A third of forward + backward with the input gradient (a GEMM
    // layer's 2 : 4, whether or not this layer computes its input
    // gradient), the rest of the FLOPs without the input gradient to W. A composite layer (a
    // transformer block) counts its parts' input gradients as its own W
    // here; it does not split, so only I + W matters for it.
    s.forward = std::min(without_input, layer.flops(rows, true) / 3.0) / per_s;
    s.backward_weights = without_input / per_s - s.forward;
  } else {
    s.forward = without_input / per_s;
  }
  s.backward_input = input / per_s;
  return s;
}

}  // namespace gpipe

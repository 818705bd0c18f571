// The synthetic (emulated) layer: its data path (copy, width change,
// gradient, B/W split), its parameters, its deck keys, and that it waits at
// least its prescribed time (a lower bound only: never an upper bound).

#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "../common/deck_error.hpp"
#include "../common/layer_harness.hpp"
#include "gpipe/layers/synthetic.hpp"

namespace gpipe {
namespace {

using test::LayerHarness;

std::vector<double> iota(std::int64_t n, double start = 1) {
  auto v = std::vector<double>(size_t(n));
  for (std::int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i);
  return v;
}

TEST(Synthetic, ForwardCopiesCommonColumnsAndZeroesTheRest) {
  // Narrowing: 3 -> 2 keeps the first two columns of each row.
  LayerHarness narrow("{type: synthetic, units: 2}", Shape{3}, 2);
  EXPECT_EQ(narrow.forward(iota(6)), (std::vector<double>{1, 2, 4, 5}));
  // Widening: 2 -> 4 pads each row with zeros.
  LayerHarness wide("{type: synthetic, units: 4}", Shape{2}, 2);
  EXPECT_EQ(wide.forward(iota(4)), (std::vector<double>{1, 2, 0, 0, 3, 4, 0, 0}));
  // Any input shape is read as flat features.
  LayerHarness image("{type: synthetic, units: 3}", Shape{1, 2, 2}, 1);
  EXPECT_EQ(image.forward(iota(4)), (std::vector<double>{1, 2, 3}));
}

TEST(Synthetic, GradientIsTheTransposedCopy) {
  for (const char* yaml : {"{type: synthetic, units: 2}", "{type: synthetic, units: 5}"}) {
    LayerHarness h(yaml, Shape{3}, 2);
    h.check(test::layer_inputs(6), 1e-7);  // central differences of sum r .* y
    Matrix<double> dx("dx", 2, 3);
    Matrix<double> y("y", 2, h.layer->out_features());
    const auto x = test::to_device(iota(6), 2, 3);
    const auto dy = test::to_device(iota(2 * h.layer->out_features(), 10), 2, h.layer->out_features());
    h.layer->backward(h.ctx, x, dy, dx);
    const auto out = h.layer->out_features();
    const std::vector<double> expected =
        out == 2 ? std::vector<double>{10, 11, 0, 12, 13, 0} : std::vector<double>{10, 11, 12, 15, 16, 17};
    EXPECT_EQ(test::to_host(dx), expected) << yaml;
  }
}

TEST(Synthetic, SplitBackwardEqualsFusedAndParametersAreRealWithZeroGradients) {
  LayerHarness h("{type: synthetic, units: 4, params: 7}", Shape{3}, 2);
  EXPECT_TRUE(h.layer->splits_backward());
  EXPECT_TRUE(find_layer_entry("synthetic")->splits_backward);
  ASSERT_EQ(h.layer->parameter_count(), 7);
  EXPECT_EQ(h.layer->parameter_specs()[0].name, "weight");
  test::expect_split_equals_fused(h, test::layer_inputs(6));
  for (double g : test::to_host(h.grads)) EXPECT_EQ(g, 0.0);
  EXPECT_EQ(h.layer->flops(16), 0.0);
  LayerHarness none("{type: synthetic, units: 4}", Shape{3}, 2);
  EXPECT_EQ(none.layer->parameter_count(), 0);
}

TEST(Synthetic, KeysAndDefaults) {
  const auto spec = parse_layer("{type: synthetic, units: 8, forward_us: 12.5, backward_weights_us: 3}");
  const auto& c = spec.as<SyntheticConfig>();
  EXPECT_EQ(c.units, 8);
  EXPECT_EQ(c.forward_us, 12.5);
  EXPECT_EQ(c.backward_input_us, 12.5);  // defaults to forward_us
  EXPECT_EQ(c.backward_weights_us, 3.0);
  EXPECT_EQ(c.params, 0);
}

TEST(Synthetic, InvalidKeysAreDeckErrors) {
  const auto err = [](const std::string& layer) {
    return test::deck_error("4", "[" + layer + "]", "emu.yaml");
  };
  EXPECT_EQ(err("{type: synthetic, forward_us: 1}"),
            "emu.yaml:3:12: missing required field 'model.layers[0].units' (a positive integer)");
  EXPECT_EQ(err("{type: synthetic, units: 2, forward_us: -1}"),
            "emu.yaml:3:52: model.layers[0].forward_us: expected a finite number >= 0 (microseconds per sample), got -1");
  EXPECT_EQ(err("{type: synthetic, units: 2, backward_input_us: .inf}"),
            "emu.yaml:3:59: model.layers[0].backward_input_us: expected a finite number >= 0 (microseconds per sample), got inf");
  EXPECT_EQ(err("{type: synthetic, units: 2, backward_weights_us: .nan}"),
            "emu.yaml:3:61: model.layers[0].backward_weights_us: expected a finite number >= 0 (microseconds per sample), got nan");
  EXPECT_EQ(err("{type: synthetic, units: 2, params: -3}"),
            "emu.yaml:3:48: model.layers[0].params: expected an integer >= 0, got -3");
}

double seconds_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(Synthetic, WaitsAtLeastItsPrescribedTime) {
  // 3 rows: forward 3 x 2000 us, B 3 x 1000 us, W 3 x 500 us; fused B + W.
  LayerHarness h("{type: synthetic, units: 2, forward_us: 2000, backward_input_us: 1000, "
                 "backward_weights_us: 500}",
                 Shape{2}, 3);
  const auto x = test::to_device(iota(6), 3, 2);
  Matrix<double> y("y", 3, 2), dx("dx", 3, 2);
  auto& layer = *h.layer;
  reset_emulated_compute();  // nothing owed from earlier sleeps on this thread
  EXPECT_GE(seconds_of([&] { layer.forward(h.ctx, x, y); }), 3 * 2000e-6);
  // Later calls may pay off what earlier ones overslept, so bound their sum:
  // it is at least the sum of their prescribed times.
  reset_emulated_compute();
  const double total = seconds_of([&] {
    const SavedView<double> none;
    layer.backward_input(h.ctx, x, y, dx, none);
    layer.backward_weights(h.ctx, x, y, none);
    layer.backward(h.ctx, x, y, dx, none);
  });
  EXPECT_GE(total, 2 * 3 * (1000e-6 + 500e-6));
}

}  // namespace
}  // namespace gpipe

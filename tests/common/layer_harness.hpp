#pragma once
// One layer alone, built through the registry, with parameters and saved
// state on the device: gradient checks by central finite differences in
// double, and forward passes on hand-written inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "test_util.hpp"
#include "gpipe/layers/factory.hpp"

namespace gpipe::test {

struct LayerHarness {
  std::unique_ptr<Layer<double>> layer;
  Vector<double> params, grads, state;
  std::int64_t rows;
  std::vector<double> r;  // objective weights: f = sum r .* y
  PassContext ctx{11, 3, 5, true};

  /// `yaml` as in a deck's model.layers, e.g. "{type: conv2d, filters: 2, kernel: 3}".
  LayerHarness(const std::string& yaml, const Shape& input, std::int64_t batch = 3,
               bool random_parameters = true)
      : rows(batch) {
    layer = make_layer<double>(layer_shape(parse_layer(yaml), input));
    params = Vector<double>("p", layer->parameter_count());
    grads = Vector<double>("g", layer->parameter_count());
    state = Vector<double>("state", layer->state_count());
    layer->bind(params.data(), grads.data());
    layer->bind_state(state.data());
    layer->initialize(5);
    if (random_parameters) {  // so gamma != 1, bias != 0, etc.
      const auto values = uniform(size_t(layer->parameter_count()), 21, -0.8, 0.8);
      set_parameters(values);
    }
    r = uniform(size_t(rows * layer->out_features()), 33);
  }

  void set_parameters(const std::vector<double>& values) {
    auto h = Kokkos::create_mirror_view(params);
    for (size_t i = 0; i < values.size(); ++i) h(i) = values[i];
    Kokkos::deep_copy(params, h);
  }

  Vector<double> saved_storage() const {
    return Vector<double>("saved", size_t(layer->saved_size().elements(rows)));
  }
  static SavedView<double> view(const Vector<double>& v) { return SavedView<double>(v.data(), v.extent(0)); }

  /// y for inputs x (rows x in_features, row-major).
  std::vector<double> forward(const std::vector<double>& x) {
    Matrix<double> y("y", rows, layer->out_features());
    const auto saved = saved_storage();
    layer->forward(ctx, to_device(x, rows, layer->in_features()), y, view(saved));
    return to_host(y);
  }

  double objective(const std::vector<double>& x) {
    const auto y = forward(x);
    double f = 0;
    for (size_t i = 0; i < y.size(); ++i) f += r[i] * y[i];
    return f;
  }

  /// Backward (after a forward that fills the saved state) against central
  /// differences of the objective, for the input and every parameter.
  void check(const std::vector<double>& x0, double tol) {
    const auto in = layer->in_features();
    Matrix<double> dx("dx", rows, in), y("y", rows, layer->out_features());
    Kokkos::deep_copy(grads, 0.0);
    const auto saved = saved_storage();
    const auto x = to_device(x0, rows, in);
    layer->forward(ctx, x, y, view(saved));
    layer->backward(ctx, x, to_device(r, rows, layer->out_features()), dx, view(saved));
    const auto dxh = to_host(dx);
    const auto gh = to_host(grads);
    const double h = 1e-6;
    for (size_t i = 0; i < x0.size(); ++i) {
      auto xp = x0, xm = x0;
      xp[i] += h;
      xm[i] -= h;
      const double fd = (objective(xp) - objective(xm)) / (2 * h);
      EXPECT_NEAR(dxh[i], fd, tol * (1 + std::abs(fd))) << layer->type() << " dx[" << i << "]";
    }
    auto ph = Kokkos::create_mirror_view(params);
    Kokkos::deep_copy(ph, params);
    for (size_t i = 0; i < gh.size(); ++i) {
      const double keep = ph(i);
      ph(i) = keep + h;
      Kokkos::deep_copy(params, ph);
      const double fp = objective(x0);
      ph(i) = keep - h;
      Kokkos::deep_copy(params, ph);
      const double fm = objective(x0);
      ph(i) = keep;
      Kokkos::deep_copy(params, ph);
      const double fd = (fp - fm) / (2 * h);
      EXPECT_NEAR(gh[i], fd, tol * (1 + std::abs(fd))) << layer->type() << " dparam[" << i << "]";
    }
  }
};

/// A forward of x0 through the harness' layer: x and dy (the objective
/// weights r) on the device, a dx buffer and the saved state it filled.
struct ForwardPass {
  Matrix<double> x, dy, dx;
  Vector<double> saved;
};
inline ForwardPass forward_pass(LayerHarness& h, const std::vector<double>& x0) {
  auto& layer = *h.layer;
  ForwardPass p{to_device(x0, h.rows, layer.in_features()), to_device(h.r, h.rows, layer.out_features()),
                Matrix<double>("dx", h.rows, layer.in_features()), h.saved_storage()};
  Matrix<double> y("y", h.rows, layer.out_features());
  layer.forward(h.ctx, p.x, y, LayerHarness::view(p.saved));
  return p;
}

/// The B/W split (backward_input, then backward_weights, with the dy
/// buffer reused in between as a cell would) equals the fused backward
/// bitwise: the same dx and the same parameter gradients.
inline void expect_split_equals_fused(LayerHarness& h, const std::vector<double>& x0) {
  auto& layer = *h.layer;
  const auto [x, dy, dx, saved] = forward_pass(h, x0);
  Kokkos::deep_copy(h.grads, 0.0);
  layer.backward(h.ctx, x, dy, dx, LayerHarness::view(saved));
  const auto fused_dx = to_host(dx);
  const auto fused_grads = to_host(h.grads);
  Kokkos::deep_copy(h.grads, 0.0);
  Kokkos::deep_copy(dx, 0.0);
  layer.backward_input(h.ctx, x, dy, dx, LayerHarness::view(saved));
  if (layer.splits_backward()) {
    for (double g : to_host(h.grads)) EXPECT_EQ(g, 0.0) << layer.type() << ": B op wrote a weight gradient";
  }
  layer.backward_weights(h.ctx, x, dy, LayerHarness::view(saved));
  EXPECT_EQ(to_host(dx), fused_dx) << layer.type();
  EXPECT_EQ(to_host(h.grads), fused_grads) << layer.type();
}

/// A backward with ctx.accumulate_gradients false over gradients holding
/// NaN writes the same parameter gradients, bitwise, as one that adds to
/// zeroed gradients (the first backward of a step, Cell::zero_gradients);
/// W op alone and fused backward alike.
inline void expect_write_equals_zero_then_add(LayerHarness& h, const std::vector<double>& x0) {
  auto& layer = *h.layer;
  ASSERT_TRUE(layer.writes_gradients()) << layer.type();
  const auto [x, dy, dx, saved] = forward_pass(h, x0);
  Kokkos::deep_copy(h.grads, 0.0);
  layer.backward(h.ctx, x, dy, dx, LayerHarness::view(saved));
  const auto added = to_host(h.grads);
  PassContext write = h.ctx;
  write.accumulate_gradients = false;
  for (int fused = 0; fused < 2; ++fused) {
    Kokkos::deep_copy(h.grads, std::nan(""));
    if (fused) layer.backward(write, x, dy, dx, LayerHarness::view(saved));
    else layer.backward_weights(write, x, dy, LayerHarness::view(saved));
    EXPECT_EQ(to_host(h.grads), added) << layer.type() << (fused ? " backward" : " backward_weights");
  }
  // And a second backward adds to what the first wrote.
  layer.backward(h.ctx, x, dy, dx, LayerHarness::view(saved));
  const auto twice = to_host(h.grads);
  for (size_t i = 0; i < twice.size(); ++i) EXPECT_EQ(twice[i], added[i] + added[i]) << layer.type() << " " << i;
}

/// Inputs in [-1.5, 1.5) away from ReLU's kink at 0.
inline std::vector<double> layer_inputs(std::int64_t count, std::uint64_t seed = 17) {
  auto x = uniform(size_t(count), seed, -1.5, 1.5);
  for (auto& v : x)
    if (std::abs(v) < 0.05) v += 0.1;
  return x;
}

}  // namespace gpipe::test

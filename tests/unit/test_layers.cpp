// Every layer's backward against central finite differences, in double.

#include <gtest/gtest.h>

#include <cmath>

#include "../common/test_util.hpp"
#include "gpipe/layers/factory.hpp"

namespace gpipe {
namespace {

constexpr std::int64_t kRows = 3;

struct Harness {
  std::unique_ptr<Layer<double>> layer;
  Vector<double> params, grads;
  std::vector<double> r;  // objective weights: f = sum r .* y
  PassContext ctx{11, 3, 5, true};

  explicit Harness(const LayerSpec& spec, std::int64_t in) {
    ModelSpec model;
    model.input_features = in;
    model.layers = {spec};
    model.layers.push_back({"dense", 2});  // any valid model; only layer 0 is tested
    layer = make_layer<double>(model, 0);
    params = Vector<double>("p", layer->parameter_count());
    grads = Vector<double>("g", layer->parameter_count());
    layer->bind(params.data(), grads.data());
    layer->initialize(5);
    // Random parameters, so gamma != 1, bias != 0, etc.
    const auto values = test::uniform(size_t(layer->parameter_count()), 21, -0.8, 0.8);
    auto h = Kokkos::create_mirror_view(params);
    for (size_t i = 0; i < values.size(); ++i) h(i) = values[i];
    Kokkos::deep_copy(params, h);
    r = test::uniform(size_t(kRows * layer->out_features()), 33);
  }

  double objective(const std::vector<double>& x) {
    Matrix<double> y("y", kRows, layer->out_features());
    layer->forward(ctx, test::to_device(x, kRows, layer->in_features()), y);
    const auto yh = test::to_host(y);
    double f = 0;
    for (size_t i = 0; i < yh.size(); ++i) f += r[i] * yh[i];
    return f;
  }

  void check(const std::vector<double>& x0, double tol) {
    const auto in = layer->in_features();
    Matrix<double> dx("dx", kRows, in);
    Kokkos::deep_copy(grads, 0.0);
    layer->backward(ctx, test::to_device(x0, kRows, in), test::to_device(r, kRows, layer->out_features()),
                    dx);
    const auto dxh = test::to_host(dx);
    const auto gh = test::to_host(grads);
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
      const double saved = ph(i);
      ph(i) = saved + h;
      Kokkos::deep_copy(params, ph);
      const double fp = objective(x0);
      ph(i) = saved - h;
      Kokkos::deep_copy(params, ph);
      const double fm = objective(x0);
      ph(i) = saved;
      Kokkos::deep_copy(params, ph);
      const double fd = (fp - fm) / (2 * h);
      EXPECT_NEAR(gh[i], fd, tol * (1 + std::abs(fd))) << layer->type() << " dparam[" << i << "]";
    }
  }
};

// Inputs away from ReLU's kink at 0.
std::vector<double> inputs(std::int64_t in) {
  auto x = test::uniform(size_t(kRows * in), 17, -1.5, 1.5);
  for (auto& v : x)
    if (std::abs(v) < 0.05) v += 0.1;
  return x;
}

TEST(LayerGradients, Dense) {
  LayerSpec s{"dense", 4};
  Harness h(s, 5);
  EXPECT_EQ(h.layer->parameter_count(), 5 * 4 + 4);
  h.check(inputs(5), 1e-7);
}

TEST(LayerGradients, ReLU) { Harness h({"relu"}, 6); h.check(inputs(6), 1e-7); }
TEST(LayerGradients, GELU) { Harness h({"gelu"}, 6); h.check(inputs(6), 1e-7); }
TEST(LayerGradients, Tanh) { Harness h({"tanh"}, 6); h.check(inputs(6), 1e-7); }

TEST(LayerGradients, LayerNorm) {
  LayerSpec s{"layer_norm"};
  Harness h(s, 7);
  EXPECT_EQ(h.layer->parameter_count(), 14);
  h.check(inputs(7), 1e-6);
}

TEST(LayerGradients, Dropout) {
  LayerSpec s{"dropout"};
  s.rate = 0.4;
  Harness h(s, 8);
  h.check(inputs(8), 1e-7);
}

TEST(LayerValues, DenseComputesAffineMap) {
  LayerSpec s{"dense", 2};
  Harness h(s, 3);
  // W (3x2) row-major, then b (1x2).
  const std::vector<double> p = {1, 2, 3, 4, 5, 6, 0.5, -1};
  auto ph = Kokkos::create_mirror_view(h.params);
  for (size_t i = 0; i < p.size(); ++i) ph(i) = p[i];
  Kokkos::deep_copy(h.params, ph);
  Matrix<double> y("y", 1, 2);
  h.layer->forward(h.ctx, test::to_device<double>({1, 1, 2}, 1, 3), y);
  const auto yh = test::to_host(y);
  EXPECT_EQ(yh[0], 1 + 3 + 2 * 5 + 0.5);
  EXPECT_EQ(yh[1], 2 + 4 + 2 * 6 - 1);
}

TEST(LayerValues, ActivationsAtKnownPoints) {
  const std::vector<double> x = {-2, 0, 0.5, 3};
  auto run = [&](const char* type) {
    Harness h({type}, 4);
    Matrix<double> y("y", 1, 4);
    h.layer->forward(h.ctx, test::to_device(x, 1, 4), y);
    return test::to_host(y);
  };
  EXPECT_EQ(run("relu"), (std::vector<double>{0, 0, 0.5, 3}));
  const auto t = run("tanh");
  for (size_t i = 0; i < x.size(); ++i) EXPECT_DOUBLE_EQ(t[i], std::tanh(x[i]));
  const auto g = run("gelu");
  EXPECT_NEAR(g[0], -0.04540230591222, 1e-12);  // tanh-approximate GELU(-2)
  EXPECT_EQ(g[1], 0.0);
  EXPECT_NEAR(g[2], 0.34571400982514, 1e-12);
  EXPECT_NEAR(g[3], 2.996362607918227, 1e-12);
}

TEST(LayerValues, LayerNormNormalizesRows) {
  Harness h({"layer_norm"}, 4);
  h.layer->initialize(0);  // gamma = 1, beta = 0
  Matrix<double> y("y", 1, 4);
  h.layer->forward(h.ctx, test::to_device<double>({1, 2, 3, 4}, 1, 4), y);
  const auto yh = test::to_host(y);
  const double inv = 1 / std::sqrt(1.25 + 1e-5);  // population variance of 1..4 is 1.25
  EXPECT_NEAR(yh[0], -1.5 * inv, 1e-14);
  EXPECT_NEAR(yh[3], 1.5 * inv, 1e-14);
}

TEST(LayerValues, FlopCounts) {
  ModelSpec model;
  model.input_features = 10;
  model.layers = {{"dense", 20}, {"relu"}};
  EXPECT_EQ(make_layer<double>(model, 0)->flops(8), 6.0 * 8 * 10 * 20 + 2.0 * 8 * 20);
  EXPECT_EQ(make_layer<double>(model, 0)->flops(8, false), 4.0 * 8 * 10 * 20 + 2.0 * 8 * 20);
  EXPECT_EQ(make_layer<double>(model, 1)->flops(8), 2.0 * 2 * 8 * 20);
}

TEST(LayerInit, HeUniformIsDeterministicAndBounded) {
  ModelSpec model;
  model.input_features = 50;
  model.layers = {{"dense", 40}, {"dense", 3}};
  auto a = make_layer<double>(model, 0), b = make_layer<double>(model, 0);
  Vector<double> pa("pa", a->parameter_count()), pb("pb", b->parameter_count()), g("g", a->parameter_count());
  a->bind(pa.data(), g.data());
  b->bind(pb.data(), g.data());
  a->initialize(123);
  b->initialize(123);
  const auto ha = test::to_host(pa), hb = test::to_host(pb);
  EXPECT_EQ(ha, hb);
  const double bound = std::sqrt(6.0 / 50);
  double max_abs = 0;
  for (size_t i = 0; i < 50 * 40; ++i) max_abs = std::max(max_abs, std::abs(ha[i]));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.9 * bound);
  for (size_t i = 50 * 40; i < ha.size(); ++i) EXPECT_EQ(ha[i], 0.0);  // biases
  b->initialize(124);
  EXPECT_NE(test::to_host(pb), ha);
}

}  // namespace
}  // namespace gpipe

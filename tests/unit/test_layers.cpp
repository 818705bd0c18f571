// Every layer's backward against central finite differences, in double.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "../common/kernel_choice.hpp"
#include "../common/layer_harness.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/layers/registry.hpp"

namespace gpipe {
namespace {

constexpr std::int64_t kRows = 3;
using Harness = test::LayerHarness;
std::vector<double> inputs(std::int64_t in) { return test::layer_inputs(kRows * in); }

TEST(LayerGradients, Dense) {
  Harness h("{type: dense, units: 4}", {5});
  EXPECT_EQ(h.layer->parameter_count(), 5 * 4 + 4);
  h.check(inputs(5), 1e-7);
}

TEST(LayerGradients, ReLU) { Harness h("{type: relu}", {6}); h.check(inputs(6), 1e-7); }
TEST(LayerGradients, GELU) { Harness h("{type: gelu}", {6}); h.check(inputs(6), 1e-7); }
TEST(LayerGradients, Tanh) { Harness h("{type: tanh}", {6}); h.check(inputs(6), 1e-7); }

TEST(LayerGradients, LayerNorm) {
  Harness h("{type: layer_norm}", {7});
  EXPECT_EQ(h.layer->parameter_count(), 14);
  h.check(inputs(7), 1e-6);
}

TEST(LayerGradients, Dropout) {
  Harness h("{type: dropout, rate: 0.4}", {8});
  h.check(inputs(8), 1e-7);
}

// Zero-bubble schedules run backward_input (B) and backward_weights (W) as
// separate ops: Dense splits for real, every other layer runs its whole
// backward at B; either way the result is the fused backward's, bitwise.
TEST(LayerSplit, BackwardInputThenWeightsEqualsFusedBitwise) {
  {
    Harness h("{type: dense, units: 4}", {5});
    EXPECT_TRUE(h.layer->splits_backward());
    test::expect_split_equals_fused(h, inputs(5));
  }
  {
    Harness h("{type: conv2d, filters: 3, kernel: 3, padding: same}", {2, 5, 4});
    EXPECT_TRUE(h.layer->splits_backward());
    test::expect_split_equals_fused(h, inputs(2 * 5 * 4));
  }
  {
    Harness h("{type: conv1d, filters: 2, kernel: 3, stride: 2}", {3, 9});
    EXPECT_TRUE(h.layer->splits_backward());
    test::expect_split_equals_fused(h, inputs(3 * 9));
  }
  for (const char* yaml : {"{type: relu}", "{type: layer_norm}", "{type: dropout, rate: 0.4}"}) {
    Harness h(yaml, {6});
    EXPECT_FALSE(h.layer->splits_backward()) << yaml;
    test::expect_split_equals_fused(h, inputs(6));
  }
}

// Layers that declare their backward does not read x
// (Layer::reads_input_in_backward false) get an x with a null data pointer
// from the stage, which then neither packs that input into 16-bit storage
// nor unpacks it: each such backward on a null x gives the same dx and parameter
// gradients, bitwise, as on the real x. The list holds every such layer
// type: a new one must be added here (the last loop).
TEST(LayerInputs, BackwardWithoutInputValuesWhereDeclared) {
  const std::vector<std::pair<std::string, Shape>> cases = {
      {"{type: maxpool2d, size: 2}", {2, 4, 6}},     {"{type: maxpool2d, size: 3, stride: 2}", {2, 5, 5}},
      {"{type: avgpool2d, size: 2}", {2, 4, 6}},     {"{type: maxpool1d, size: 2}", {3, 8}},
      {"{type: avgpool1d, size: 3, stride: 1}", {2, 7}}, {"{type: global_avgpool}", {3, 2, 2}},
      {"{type: flatten}", {2, 3, 2}},                {"{type: dropout, rate: 0.4}", {8}},
      {"{type: pos_embed}", {4, 3}},                 {"{type: token_mean}", {4, 3}}};
  std::set<std::string> declared;
  for (const auto& [yaml, shape] : cases) {
    Harness h(yaml, shape);
    auto& layer = *h.layer;
    EXPECT_FALSE(layer.reads_input_in_backward()) << yaml;
    declared.insert(layer.type());
    const auto [x, dy, dx, saved] = test::forward_pass(h, inputs(layer.in_features()));
    Kokkos::deep_copy(h.grads, 0.0);
    layer.backward(h.ctx, x, dy, dx, Harness::view(saved));
    const auto real_dx = test::to_host(dx);
    const auto real_grads = test::to_host(h.grads);
    Kokkos::deep_copy(h.grads, 0.0);
    Kokkos::deep_copy(dx, -7.0);
    const ConstMatrix<double> none(static_cast<const double*>(nullptr), x.extent(0), x.extent(1));
    layer.backward_input(h.ctx, none, dy, dx, Harness::view(saved));
    layer.backward_weights(h.ctx, none, dy, Harness::view(saved));
    EXPECT_EQ(test::to_host(dx), real_dx) << yaml;
    EXPECT_EQ(test::to_host(h.grads), real_grads) << yaml;
    double sum = 0;
    for (double v : real_dx) sum += std::abs(v);
    EXPECT_GT(sum, 0.0) << yaml << ": a zero dx would not show a wrong x";
  }
  for (const char* yaml : {"{type: dense, units: 3}", "{type: relu}", "{type: gelu}", "{type: layer_norm}"})
    EXPECT_TRUE(Harness(yaml, {6}).layer->reads_input_in_backward()) << yaml;
  EXPECT_TRUE(Harness("{type: conv2d, filters: 2, kernel: 3}", {1, 4, 4}).layer->reads_input_in_backward());
  // Every other layer type must read x: built with its keys' defaults on a
  // flat, an image and a token input, wherever it accepts one.
  int built = 0;
  for (const auto& type : layer_types())
    if (!declared.count(type))
      for (const Shape& input : {Shape{12}, Shape{2, 6, 6}, Shape{4, 6}}) {
        std::unique_ptr<Layer<double>> l;
        try {
          l = make_layer<double>(layer_shape(parse_layer("{type: " + type + "}"), input));
        } catch (const std::exception&) {
          continue;  // required keys, or another input rank
        }
        ++built;
        EXPECT_TRUE(l->reads_input_in_backward()) << type << " declares no read of x: add it to this test's list";
      }
  EXPECT_GE(built, 4);  // relu, gelu, tanh, layer_norm at least
}

// A step's first backward writes the gradients (the weight-gradient GEMM
// with beta = 0) instead of zeroing them and adding.
TEST(LayerWrites, FirstBackwardWritesWhatZeroThenAddGives) {
  {
    Harness h("{type: dense, units: 4}", {5});
    test::expect_write_equals_zero_then_add(h, inputs(5));
  }
  {
    Harness h("{type: conv2d, filters: 3, kernel: 3, padding: same}", {2, 5, 4});
    test::expect_write_equals_zero_then_add(h, inputs(2 * 5 * 4));
  }
  {
    Harness h("{type: conv2d, filters: 2, kernel: 2, bias: false}", {1, 4, 4});
    test::expect_write_equals_zero_then_add(h, inputs(16));
  }
  for (const char* yaml : {"{type: relu}", "{type: layer_norm}"}) {
    Harness h(yaml, {6});
    EXPECT_FALSE(h.layer->writes_gradients()) << yaml;
  }
}

// ReLU's branch-free derivative: 1 above 0, 0 at and below 0 (also -inf),
// NaN for NaN.
TEST(LayerValues, ReluBackwardAtKnownPoints) {
  Harness h("{type: relu}", {5});
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> x = {-inf, -1, 0, 2, std::nan("")};
  Matrix<double> dx("dx", 1, 5);
  h.layer->backward(h.ctx, test::to_device(x, 1, 5), test::to_device<double>({3, 3, 3, 3, 3}, 1, 5), dx);
  const auto d = test::to_host(dx);
  EXPECT_EQ(d[0], 0.0);
  EXPECT_EQ(d[1], 0.0);
  EXPECT_EQ(d[2], 0.0);
  EXPECT_EQ(d[3], 3.0);
  EXPECT_TRUE(std::isnan(d[4]));
}

TEST(LayerValues, DenseComputesAffineMap) {
  Harness h("{type: dense, units: 2}", {3});
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
    Harness h(std::string("{type: ") + type + "}", {4});
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

// float GELU, per implementation of the seam's eltwise primitive (the
// layer's own loop, oneDNN's JIT eltwise where built): values and
// derivatives within a few float roundings of the double formula over
// [-10, 10], and NaN propagates through both.
TEST(LayerValues, FloatGeluNearTheDoubleFormulaPerImplementation) {
  const std::int64_t n = 4001;
  std::vector<float> x(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) x[size_t(i)] = float(-10.0 + 20.0 * double(i) / double(n - 1));
  x[2000] = std::numeric_limits<float>::quiet_NaN();  // replaces 0
  auto layer = make_layer<float>(layer_shape(parse_layer("{type: gelu}"), Shape{n}));
  PassContext ctx;
  const auto xd = test::to_device(x, 1, n);
  std::vector<std::vector<float>> outputs;
  for (const auto impl : kernels::available()) {
    if (!kernels::has(impl, kernels::Primitive::eltwise, 4)) continue;
    kernels::select(test::forcing(impl));
    ASSERT_EQ(kernels::implementation(kernels::Primitive::eltwise, 4), impl);
    Matrix<float> y("y", 1, n), dx("dx", 1, n);
    layer->forward(ctx, xd, y, SavedView<float>());
    layer->backward(ctx, xd, test::to_device(std::vector<float>(size_t(n), 1.0f), 1, n), dx, SavedView<float>());
    kernels::select(kernels::Choice::automatic);
    const auto yh = test::to_host(y), dh = test::to_host(dx);
    outputs.push_back(yh);
    const double c = 0.7978845608028654, a = 0.044715;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = x[size_t(i)];
      if (i == 2000) {
        EXPECT_TRUE(std::isnan(yh[size_t(i)]) && std::isnan(dh[size_t(i)])) << kernels::name(impl);
        continue;
      }
      const double t = std::tanh(c * (v + a * v * v * v));
      const double ref = 0.5 * v * (1 + t);
      const double dref = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * a * v * v);
      ASSERT_NEAR(yh[size_t(i)], ref, 1e-6 * (1 + std::abs(v))) << kernels::name(impl) << " x " << v;
      ASSERT_NEAR(dh[size_t(i)], dref, 2e-6 * (1 + v * v)) << kernels::name(impl) << " x " << v;
    }
  }
  EXPECT_EQ(outputs.size(), kernels::available().size() >= 2 && kernels::has(kernels::Implementation::onednn, kernels::Primitive::eltwise, 4) ? 2u : 1u);
}

TEST(LayerValues, LayerNormNormalizesRows) {
  Harness h("{type: layer_norm}", {4});
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
  model.layers = {parse_layer("{type: dense, units: 20}"), parse_layer("{type: relu}")};
  EXPECT_EQ(make_layer<double>(model, 0)->flops(8), 6.0 * 8 * 10 * 20 + 2.0 * 8 * 20);
  EXPECT_EQ(make_layer<double>(model, 0)->flops(8, false), 4.0 * 8 * 10 * 20 + 2.0 * 8 * 20);
  EXPECT_EQ(make_layer<double>(model, 1)->flops(8), 2.0 * 2 * 8 * 20);
}

TEST(LayerInit, HeUniformIsDeterministicAndBounded) {
  ModelSpec model;
  model.input_features = 50;
  model.layers = {parse_layer("{type: dense, units: 40}"), parse_layer("{type: dense, units: 3}")};
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

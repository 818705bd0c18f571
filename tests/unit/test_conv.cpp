// The convolutional family: gradients against central finite differences in
// double (strides, padding, odd sizes, 3 channels, a batch of 1), known
// values on hand-written inputs, FLOP counts, and each shape error's message.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../common/deck_error.hpp"
#include "../common/layer_harness.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"

namespace gpipe {
namespace {

using test::LayerHarness;

// 3 channels of 5 x 7 images.
const Shape kImage{3, 5, 7};

void check(const std::string& yaml, const Shape& in, std::int64_t batch, const Shape& out) {
  LayerHarness h(yaml, in, batch);
  EXPECT_EQ(h.layer->output_shape(), out) << yaml;
  h.check(test::layer_inputs(batch * in.size()), 1e-6);
}

TEST(ConvGradients, Conv2dStridePaddingBias) {
  check("{type: conv2d, filters: 2, kernel: 3, stride: 2, padding: 1}", kImage, 3, {2, 3, 4});
  check("{type: conv2d, filters: 2, kernel: 3, stride: 2, padding: 1}", kImage, 1, {2, 3, 4});
}

TEST(ConvGradients, Conv2dSameAndValid) {
  check("{type: conv2d, filters: 4, kernel: 3, padding: same}", kImage, 2, {4, 5, 7});
  check("{type: conv2d, filters: 2, kernel: 2, bias: false}", kImage, 2, {2, 4, 6});
  check("{type: conv2d, filters: 1, kernel: 5, stride: 3, padding: 2}", kImage, 1, {1, 2, 3});
}

TEST(ConvGradients, Pooling) {
  check("{type: maxpool2d, size: 2}", kImage, 3, {3, 2, 3});
  check("{type: maxpool2d, size: 3, stride: 2}", kImage, 1, {3, 2, 3});  // overlapping windows
  check("{type: avgpool2d, size: 2, stride: 1}", kImage, 2, {3, 4, 6});
  check("{type: avgpool2d, size: 3, stride: 2}", kImage, 1, {3, 2, 3});
  check("{type: global_avgpool}", kImage, 2, {3});
  check("{type: flatten}", kImage, 1, {105});
}

// 3 channels of length-9 signals.
const Shape kSignal{3, 9};

TEST(ConvGradients, Conv1dAndPooling1d) {
  check("{type: conv1d, filters: 2, kernel: 3, stride: 2, padding: 1}", kSignal, 3, {2, 5});
  check("{type: conv1d, filters: 4, kernel: 3, padding: same}", kSignal, 1, {4, 9});
  check("{type: conv1d, filters: 2, kernel: 4, bias: false}", kSignal, 2, {2, 6});
  check("{type: maxpool1d, size: 2}", kSignal, 3, {3, 4});
  check("{type: maxpool1d, size: 3, stride: 2}", kSignal, 1, {3, 4});  // overlapping windows
  check("{type: avgpool1d, size: 3, stride: 1}", kSignal, 2, {3, 7});
}

TEST(ConvValues, Conv1dAndPool1dOnHandWrittenSignal) {
  // One channel, kernel (1, 0, -1) + bias 0.5 on 1, 2, 4, 8, 16: x[l] - x[l+2] + 0.5.
  LayerHarness c("{type: conv1d, filters: 1, kernel: 3}", {1, 5}, 1, false);
  c.set_parameters({1, 0, -1, 0.5});
  EXPECT_EQ(c.forward({1, 2, 4, 8, 16}), (std::vector<double>{-2.5, -5.5, -11.5}));
  LayerHarness m("{type: maxpool1d, size: 2}", {2, 4}, 1, false);
  EXPECT_EQ(m.forward({1, 3, 2, 0, -1, -2, 5, 4}), (std::vector<double>{3, 2, -1, 5}));
  LayerHarness a("{type: avgpool1d, size: 2, stride: 1}", {1, 4}, 1, false);
  EXPECT_EQ(a.forward({1, 3, 2, 0}), (std::vector<double>{2, 2.5, 1}));
}

TEST(ConvValues, Conv3x3OnHandWrittenImage) {
  // One 4x4 channel, one 3x3 filter, valid padding: a 2x2 output.
  LayerHarness h("{type: conv2d, filters: 1, kernel: 3}", {1, 4, 4}, 1, false);
  h.set_parameters({1, 0, -1,  //
                    2, 0, -2,  //
                    1, 0, -1,  //
                    0.5});     // bias
  const std::vector<double> x = {1, 2, 3, 4,  //
                                 5, 6, 7, 8,  //
                                 9, 10, 11, 12,  //
                                 13, 14, 15, 17};
  // Sobel-x on a ramp of slope 1 per column: (1+2+1)*(-2) = -8, plus bias;
  // the bottom-right window sees 17 instead of 16: -8 - 1.
  EXPECT_EQ(h.forward(x), (std::vector<double>{-7.5, -7.5, -7.5, -8.5}));
  // With padding 1 the corner output sees only the lower-right 2x2 block.
  LayerHarness p("{type: conv2d, filters: 1, kernel: 3, padding: 1, bias: false}", {1, 4, 4}, 1, false);
  p.set_parameters({0, 0, 0, 0, 1, 2, 0, 3, 4});
  EXPECT_EQ(p.forward(x)[0], 1 * 1 + 2 * 2 + 3 * 5 + 4 * 6);
}

TEST(ConvValues, MaxPool2x2OnHandWrittenImage) {
  LayerHarness h("{type: maxpool2d, size: 2}", {1, 4, 4}, 1);
  const std::vector<double> x = {1, 5, 2, 0,  //
                                 3, 4, 8, 1,  //
                                 -1, -2, 6, 6,  //
                                 -3, -4, 7, 2};
  EXPECT_EQ(h.forward(x), (std::vector<double>{5, 8, -1, 7}));
  // The gradient goes to each window's maximum only.
  Matrix<double> y("y", 1, 4), dx("dx", 1, 16);
  Vector<double> saved("saved", h.layer->saved_size().elements(1));
  const auto xd = test::to_device(x, 1, 16);
  h.layer->forward(h.ctx, xd, y, LayerHarness::view(saved));
  h.layer->backward(h.ctx, xd, test::to_device<double>({10, 20, 30, 40}, 1, 4), dx,
                    LayerHarness::view(saved));
  EXPECT_EQ(test::to_host(dx), (std::vector<double>{0, 10, 0, 0, 0, 0, 20, 0,  //
                                                    30, 0, 0, 0, 0, 0, 40, 0}));
}

// Ties go to the first maximum in row-major window order: (0, 0) before
// (0, 1) before (1, 0) before (1, 1), for 2 x 2 and 3 x 3 windows: the
// rule a faster max-pool kernel must keep (perf/README.md, "Issue 22:
// conversions through oneDNN": a branch-free 2 x 2 loop was tried).
TEST(ConvValues, MaxPoolTiesGoToTheFirstMaximum) {
  for (const std::int64_t size : {2, 3}) {
    const std::int64_t W = 2 * size;
    LayerHarness h(fmt::format("{{type: maxpool2d, size: {}}}", size), {1, size, W}, 1);
    // Window 0: all equal (first element wins); window 1: the maximum
    // twice, first in the second row.
    std::vector<double> x(size_t(size * W), -1.0);
    for (std::int64_t r = 0; r < size; ++r)
      for (std::int64_t c = 0; c < size; ++c) x[size_t(r * W + c)] = 5;
    x[size_t(1 * W + size)] = 9;
    x[size_t(1 * W + size + 1)] = 9;
    x[size_t((size - 1) * W + W - 1)] = 9;
    EXPECT_EQ(h.forward(x), (std::vector<double>{5, 9})) << size;
    Matrix<double> y("y", 1, 2), dx("dx", 1, size * W);
    Vector<double> saved("saved", h.layer->saved_size().elements(1));
    const auto xd = test::to_device(x, 1, size * W);
    h.layer->forward(h.ctx, xd, y, LayerHarness::view(saved));
    h.layer->backward(h.ctx, xd, test::to_device<double>({10, 20}, 1, 2), dx, LayerHarness::view(saved));
    std::vector<double> expected(size_t(size * W), 0.0);
    expected[0] = 10;
    expected[size_t(1 * W + size)] = 20;
    EXPECT_EQ(test::to_host(dx), expected) << size;
  }
}

TEST(ConvValues, FlopCounts) {
  const auto conv = layer_shape(parse_layer("{type: conv2d, filters: 4, kernel: 3, padding: same}"),
                                {2, 5, 7});
  const double gemm = 2.0 * 8 * 35 * 18 * 4;  // n * pixels * (C K K) * F
  EXPECT_EQ(conv.flops(8), 3 * gemm + 2.0 * 8 * 35 * 4);
  EXPECT_EQ(conv.flops(8, false), 2 * gemm + 2.0 * 8 * 35 * 4);
  EXPECT_EQ(conv.parameter_count(), 4 * 18 + 4);
  const auto pool = layer_shape(parse_layer("{type: maxpool2d, size: 2}"), {2, 5, 7});
  EXPECT_EQ(pool.flops(8), 2.0 * 8 * (2 * 2 * 3) * 4);
  EXPECT_EQ(pool.saved.elements(8), 8 * 2 * 2 * 3);
}

std::string deck_error(const std::string& input, const std::string& layers) {
  return test::deck_error(input, layers, "cnn.yaml");
}

TEST(ConvShapeErrors, ExactMessages) {
  EXPECT_EQ(deck_error("784", "[{type: conv2d, filters: 2, kernel: 3}, {type: flatten}, {type: dense, units: 2}]"),
            "cnn.yaml:3:12 (model.layers[0]): layer 0 (conv2d) cannot take input shape [784]: "
            "expected (channels, height, width)");
  EXPECT_EQ(deck_error("[1, 3, 3]", "[{type: conv2d, filters: 2, kernel: 5}, {type: flatten}, {type: dense, units: 2}]"),
            "cnn.yaml:3:12 (model.layers[0]): layer 0 (conv2d) cannot take input shape [1, 3, 3]: "
            "expected height and width of at least 5 for kernel 5 with padding 0");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: conv2d, filters: 2, kernel: 3}, {type: maxpool2d, size: 5}, "
                                    "{type: flatten}, {type: dense, units: 2}]"),
            "cnn.yaml:3:51 (model.layers[1]): layer 1 (maxpool2d) cannot take input shape [2, 4, 4]: "
            "expected height and width of at least 5 for size 5");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: conv2d, filters: 2, kernel: 3}, {type: dense, units: 2}]"),
            "cnn.yaml:3:51 (model.layers[1]): layer 1 (dense) cannot take input shape [2, 4, 4]: "
            "expected (features); add {type: flatten} before it");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: flatten}, {type: global_avgpool}]"),
            "cnn.yaml:3:29 (model.layers[1]): layer 1 (global_avgpool) cannot take input shape [36]: "
            "expected (channels, height, width)");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: conv2d, filters: 2, kernel: 3}]"),
            "model.layers: the last layer must output a flat vector of class logits, got shape "
            "[2, 4, 4] (add {type: flatten})");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: conv2d, filters: 2, kernel: 4, padding: same}]"),
            "cnn.yaml:3:59: model.layers[0].padding: same needs an odd kernel, got kernel 4");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: conv2d, filters: 2, kernel: 3, padding: full}]"),
            "cnn.yaml:3:59: model.layers[0].padding: expected same, valid or an integer >= 0, got "
            "'full'");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: conv1d, filters: 2, kernel: 3}, {type: flatten}, {type: dense, units: 2}]"),
            "cnn.yaml:3:12 (model.layers[0]): layer 0 (conv1d) cannot take input shape [1, 6, 6]: "
            "expected (channels, length)");
  EXPECT_EQ(deck_error("[2, 4]", "[{type: maxpool1d, size: 5}, {type: flatten}, {type: dense, units: 2}]"),
            "cnn.yaml:3:12 (model.layers[0]): layer 0 (maxpool1d) cannot take input shape [2, 4]: "
            "expected length of at least 5 for size 5");
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: maxpool2d, size: 0}]"),
            "cnn.yaml:3:36: model.layers[0].size: expected a positive integer, got 0");
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(BatchNorm2d, GradientsWithMicroBatchStatistics) {
  check("{type: batchnorm2d}", kImage, 3, kImage);
  check("{type: batchnorm2d, eps: 0.01}", kImage, 1, kImage);  // a batch of 1: statistics over 5 x 7
}

TEST(BatchNorm2d, TrainingNormalizesAndUpdatesRunningStatistics) {
  LayerHarness h("{type: batchnorm2d, momentum: 0.5}", {1, 1, 2}, 2, false);
  h.set_parameters({1, 0});  // gamma, beta
  // One channel, 2 samples x 2 pixels: values 1, 2, 3, 6: mean 3, biased variance 3.5.
  const auto y = h.forward({1, 2, 3, 6});
  const double rstd = 1 / std::sqrt(3.5 + 1e-5);
  EXPECT_NEAR(y[0], -2 * rstd, 1e-14);
  EXPECT_NEAR(y[3], 3 * rstd, 1e-14);
  // running = 0.5 initial + 0.5 statistic; the variance unbiased (14 / 3).
  EXPECT_EQ(test::to_host(h.state), (std::vector<double>{0.5 * 3, 0.5 * 1 + 0.5 * 14.0 / 3}));
  // A recompute (re-materialization) leaves the running statistics alone.
  h.ctx.recompute = true;
  h.forward({10, 20, 30, 60});
  EXPECT_EQ(test::to_host(h.state), (std::vector<double>{0.5 * 3, 0.5 * 1 + 0.5 * 14.0 / 3}));
  // Evaluation normalizes with the running statistics.
  h.ctx.training = false;
  const auto e = h.forward({1, 2, 3, 6});
  EXPECT_NEAR(e[0], (1 - 1.5) / std::sqrt(0.5 + 7.0 / 3 + 1e-5), 1e-14);
}

TEST(BatchNorm2d, ShapesAndState) {
  const auto s = layer_shape(parse_layer("{type: batchnorm2d}"), {4, 3, 3});
  EXPECT_EQ(s.parameter_count(), 8);
  EXPECT_EQ(s.state_count(), 8);
  EXPECT_EQ(s.saved.elements(16), 8);  // (mean, 1/std) per channel, per micro-batch
  EXPECT_EQ(deck_error("[1, 6, 6]", "[{type: flatten}, {type: batchnorm2d}]"),
            "cnn.yaml:3:29 (model.layers[1]): layer 1 (batchnorm2d) cannot take input shape [36]: "
            "expected (channels, height, width)");
}

}  // namespace
}  // namespace gpipe

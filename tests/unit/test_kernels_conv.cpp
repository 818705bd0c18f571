// The kernel seam's convolution (gpipe/kernels/conv.hpp): every float
// implementation (portable, and oneDNN where built) against the portable
// one run in double, on edge shapes (1x1 images, kernel = input, stride not
// dividing, padding same and valid, 1 channel, batch 1, conv1d's H = 1),
// forward and all gradients, within the rounding bound of a sum of L terms:
// |computed - exact| <= 2 L eps sum|terms| (Higham, Accuracy and Stability
// of Numerical Algorithms, 2002, eq. 3.5, with slack 2: gamma_L <= 2 L u,
// u = eps / 2), sum|terms| being the same convolution of |x|, |w|, |dy|;
// oneDNN against portable within the sum of both bounds. Then the
// invariants the pipeline's bitwise tests need, per implementation: saved
// columns equal recomputed ones, the fused backward equals W then B,
// repeated calls and each sample's forward and input gradient are
// independent of the batch size, accumulate adds; a steady state creates
// no oneDNN primitive; bad extents throw naming them.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../common/conv_cases.hpp"
#include "../common/layer_harness.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/conv.hpp"

namespace gpipe {
namespace {

using kernels::Conv2d;
using kernels::ConvShape;
using kernels::Implementation;
using namespace test::conv;

TEST(ConvKernels, EveryFloatImplementationWithinTheRoundingBoundOnEdgeShapes) {
  unsigned seed = 100;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const Reference r = reference(c, in);
    for (const auto impl : float_implementations())
      expect_accurate(c, run<float>(c, impl, in), r, 1.0, kernels::name(impl));
  }
}

TEST(ConvKernels, OneDnnAgainstPortableOnEdgeShapes) {
  if (!has_onednn()) GTEST_SKIP() << "built without oneDNN";
  unsigned seed = 300;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const Reference r = reference(c, in);
    const Outputs portable = run<float>(c, Implementation::portable, in);
    // |onednn - portable| <= |onednn - exact| + |portable - exact|: twice the bound.
    Reference around_portable{portable, r.magnitude};
    expect_accurate(c, run<float>(c, Implementation::onednn, in), around_portable, 2.0, "onednn vs portable");
  }
}

TEST(ConvKernels, AccumulateAddsToTheGradients) {
  unsigned seed = 500;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const Outputs exact = run<double>(c, Implementation::portable, in, Path::split, true);
    Inputs magnitude_in{absolute(in.x), absolute(in.w), absolute(in.b), absolute(in.dy), absolute(in.dw0),
                        absolute(in.db0)};
    const Outputs magnitude = run<double>(c, Implementation::portable, magnitude_in, Path::split, true);
    for (const auto impl : float_implementations()) {
      const Outputs got = run<float>(c, impl, in, Path::split, true);
      const double L = double(c.n * c.s.pixels()) + 1;
      expect_within(got.dw, exact.dw, magnitude.dw, L, 1.0, std::string(kernels::name(impl)) + " " + c.name + " dw");
      expect_within(got.db, exact.db, magnitude.db, L, 1.0, std::string(kernels::name(impl)) + " " + c.name + " db");
    }
  }
}

TEST(ConvKernels, PortableInvariantsFloatAndDouble) {
  expect_invariants<float>(Implementation::portable);
  expect_invariants<double>(Implementation::portable);
}

TEST(ConvKernels, OneDnnInvariants) {
  if (!has_onednn()) GTEST_SKIP() << "built without oneDNN";
  expect_invariants<float>(Implementation::onednn);
}

TEST(ConvKernels, SteadyStateCreatesNoOneDnnPrimitive) {
  if (!has_onednn()) GTEST_SKIP() << "built without oneDNN";
  const Case c = edge_cases()[6];
  const Inputs in = inputs(c, 900);
  Conv2d<float> conv(c.s, Implementation::onednn);
  const auto before = kernels::conv2d_primitives_created();
  run<float>(c, Implementation::onednn, in, Path::split, false, &conv);
  EXPECT_EQ(kernels::conv2d_primitives_created(), before + 3);  // forward, backward-data, backward-weights
  for (int step = 0; step < 3; ++step) {
    run<float>(c, Implementation::onednn, in, Path::split, true, &conv);
    run<float>(c, Implementation::onednn, in, Path::fused, false, &conv);
  }
  EXPECT_EQ(kernels::conv2d_primitives_created(), before + 3);
}

TEST(ConvKernels, SavedStatePerSample) {
  const ConvShape s = shape(3, 6, 5, 4, 3, 3, 2, 1);  // OH 3, OW 3, taps 27
  EXPECT_EQ(kernels::conv2d_saved_per_sample(s, Implementation::portable), 27 * 9);
  EXPECT_EQ(kernels::conv2d_saved_per_sample(s, Implementation::onednn), 0);
  EXPECT_EQ(Conv2d<double>(s, Implementation::portable).saved_per_sample(), 27 * 9);
}

// The registry entry's saved size (what the buffer plan and the cell's
// activation bytes count) follows the float conv2d implementation in force:
// the portable columns, or nothing for oneDNN; conv1d alike.
TEST(ConvKernels, LayerSavedSizeFollowsTheImplementation) {
  if (std::getenv("GPIPE_KERNELS") != nullptr) GTEST_SKIP() << "GPIPE_KERNELS overrides the choice";
  const auto conv2d = parse_layer("{type: conv2d, filters: 4, kernel: 3, stride: 2, padding: 1}");
  const auto conv1d = parse_layer("{type: conv1d, filters: 2, kernel: 3}");
  kernels::select(kernels::Choice::portable);
  EXPECT_EQ(layer_shape(conv2d, Shape{3, 6, 5}).saved.per_sample, 27 * 9);  // taps 27, OH 3 x OW 3
  EXPECT_EQ(layer_shape(conv1d, Shape{3, 9}).saved.per_sample, 9 * 7);      // taps 9, OL 7
  EXPECT_EQ(make_layer<float>(layer_shape(conv2d, Shape{3, 6, 5}))->saved_size().per_sample, 27 * 9);
  if (has_onednn()) {
    kernels::select(kernels::Choice::onednn);
    EXPECT_EQ(layer_shape(conv2d, Shape{3, 6, 5}).saved.per_sample, 0);
    EXPECT_EQ(layer_shape(conv1d, Shape{3, 9}).saved.per_sample, 0);
  }
  kernels::select(kernels::Choice::automatic);
}

TEST(ConvKernels, BadExtentsThrowNamingThem) {
  const ConvShape s = shape(2, 4, 4, 3, 3, 3, 1, 1);
  Conv2d<double> conv(s, Implementation::portable);
  Matrix<double> x("x", 2, 31), w("w", 3, 18), y("y", 2, 48);
  try {
    conv.forward(ExecSpace(), x, w, {}, y, {});
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "gpipe::kernels::Conv2d::forward: x (2, 31), w (3, 18), b (0), y (2, 48) for C*H*W 32, F*P 48, taps 18");
  }
  ConvShape bad = s;
  bad.kernel_h = 7;  // 4 + 2 < 7
  try {
    Conv2d<double> c(bad, Implementation::portable);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "gpipe::kernels::Conv2d::Conv2d: invalid shape C 2 H 4 W 4 F 3 kernel 7x3 stride 1x1 pad 1x1");
  }
  if (!has_onednn()) {
    try {
      Conv2d<float> c(s, Implementation::onednn);
      ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "gpipe::kernels::Conv2d::Conv2d: this build has no onednn conv2d at 4 bytes per scalar");
    }
  }
  try {  // oneDNN has no f64 convolution: never at double
    Conv2d<double> c(s, Implementation::onednn);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "gpipe::kernels::Conv2d::Conv2d: this build has no onednn conv2d at 8 bytes per scalar");
  }
}

}  // namespace
}  // namespace gpipe

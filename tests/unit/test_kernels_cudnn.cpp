// The kernel seam's cuDNN convolution (src/kernels/conv_cudnn.cpp) against
// the portable reference, built into gpipe_unit_tests only in CUDA builds
// with GPIPE_ENABLE_CUDNN (tests/CMakeLists.txt); it runs on a GPU node.
// Mirrors the oneDNN convolution tests of test_kernels_conv.cpp, at float
// and at double (cuDNN has both):
//   * within the rounding bound of a sum of L terms of the exact value
//     (portable in double; for double, portable in double is the other
//     implementation, so cuDNN double within twice the bound of it), and
//     of the portable float result (twice the bound), on the edge shapes
//     (1x1 images, kernel = input, stride not dividing, padding same and
//     valid, 1 channel, batch 1, conv1d);
//   * accumulate adds to dW and db;
//   * the invariants the pipeline's bitwise tests need: repeatable, fused =
//     W then B, each sample's forward output and dx independent of n;
//   * db bitwise the portable one's (the same fixed-order reduction);
//   * no saved state, chosen by auto and by `kernels: cudnn`, --version's
//     line.
// Written and compiled without a GPU: see docs/porting.md.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "../common/conv_cases.hpp"
#include "../common/test_util.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/core/memory.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/train/plan.hpp"
#include "gpipe/kernels/conv.hpp"

namespace gpipe {
namespace {

using kernels::Choice;
using kernels::Implementation;
using kernels::Primitive;
using namespace test::conv;

struct Selected {
  explicit Selected(Choice c) { kernels::select(c); }
  ~Selected() { kernels::select(Choice::automatic); }
};

TEST(KernelsCudnn, IsAvailableAndChosenForConv2d) {
  const auto impls = kernels::available();
  EXPECT_NE(std::find(impls.begin(), impls.end(), Implementation::cudnn), impls.end());
  EXPECT_TRUE(kernels::has(Implementation::cudnn, Primitive::conv2d, 4));
  EXPECT_TRUE(kernels::has(Implementation::cudnn, Primitive::conv2d, 8));
  EXPECT_FALSE(kernels::has(Implementation::cudnn, Primitive::conv2d, 2));
  EXPECT_FALSE(kernels::has(Implementation::cudnn, Primitive::gemm, 4));
  EXPECT_FALSE(kernels::has(Implementation::cudnn, Primitive::attention, 4));
  if (std::getenv("GPIPE_KERNELS") == nullptr) {
    EXPECT_EQ(kernels::implementation(Primitive::conv2d, 4), Implementation::cudnn);
    EXPECT_EQ(kernels::implementation(Primitive::conv2d, 8), Implementation::cudnn);
    Selected s(Choice::cudnn);
    EXPECT_EQ(kernels::implementation(Primitive::conv2d, 4), Implementation::cudnn);
    EXPECT_EQ(kernels::implementation(Primitive::gemm, 4), Implementation::portable);  // cuDNN has no GEMM here
  }
  EXPECT_EQ(kernels::parse_choice("cudnn", "f"), Choice::cudnn);
  EXPECT_EQ(std::string(kernels::name(Implementation::cudnn)), "cudnn");
  EXPECT_NE(kernels::build_summary().find(", cudnn (cuDNN 9."), std::string::npos) << kernels::build_summary();
  EXPECT_NE(kernels::build_summary().find(": conv2d)"), std::string::npos) << kernels::build_summary();
}

TEST(KernelsCudnn, NeedsNoSavedState) {
  const ConvShape s = shape(3, 6, 5, 4, 3, 3, 2, 1);
  EXPECT_EQ(kernels::conv2d_saved_per_sample(s, Implementation::cudnn), 0);
  EXPECT_EQ(kernels::Conv2d<float>(s, Implementation::cudnn).saved_per_sample(), 0);
  EXPECT_EQ(kernels::Conv2d<double>(s, Implementation::cudnn).saved_per_sample(), 0);
}

TEST(KernelsCudnn, FloatWithinTheRoundingBoundAndAgainstPortable) {
  unsigned seed = 1100;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const Reference r = reference(c, in);
    const Outputs got = run<float>(c, Implementation::cudnn, in);
    expect_accurate(c, got, r, 1.0, "cudnn float");
    // |cudnn - portable| <= |cudnn - exact| + |portable - exact|: twice the bound.
    const Outputs portable = run<float>(c, Implementation::portable, in);
    expect_accurate(c, got, Reference{portable, r.magnitude}, 2.0, "cudnn vs portable float");
    EXPECT_EQ(got.db, portable.db) << c.name << ": db is the portable fixed-order reduction";
  }
}

// In double the bound holds with eps of float (expect_within's), so it is
// loose; the tight check: within 2 L eps_double sum|terms| of portable.
void expect_near_double(const std::vector<double>& got, const std::vector<double>& portable,
                        const std::vector<double>& magnitude, double length, const std::string& what) {
  ASSERT_EQ(got.size(), portable.size()) << what;
  const double eps = std::numeric_limits<double>::epsilon();
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = 2.0 * 2.0 * length * eps * magnitude[i];
    if (!(std::abs(got[i] - portable[i]) <= bound) && reported++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs portable " << portable[i] << ", bound " << bound;
  }
}

TEST(KernelsCudnn, DoubleAgainstPortable) {
  unsigned seed = 1300;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const Reference r = reference(c, in);  // portable in double
    const Outputs got = run<double>(c, Implementation::cudnn, in);
    const auto& s = c.s;
    const double P = double(s.pixels()), n = double(c.n);
    expect_near_double(got.y, r.exact.y, r.magnitude.y, double(s.taps() + 1), c.name + " y");
    expect_near_double(got.dx, r.exact.dx, r.magnitude.dx, double(s.filters * s.kernel_h * s.kernel_w + 1),
                       c.name + " dx");
    expect_near_double(got.dw, r.exact.dw, r.magnitude.dw, n * P, c.name + " dw");
    EXPECT_EQ(got.db, r.exact.db) << c.name << ": db is the portable fixed-order reduction";
  }
}

TEST(KernelsCudnn, AccumulateAddsToTheGradients) {
  unsigned seed = 1500;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const Outputs exact = run<double>(c, Implementation::portable, in, Path::split, true);
    Inputs magnitude_in{absolute(in.x), absolute(in.w), absolute(in.b), absolute(in.dy), absolute(in.dw0),
                        absolute(in.db0)};
    const Outputs magnitude = run<double>(c, Implementation::portable, magnitude_in, Path::split, true);
    const Outputs got = run<float>(c, Implementation::cudnn, in, Path::split, true);
    const double L = double(c.n * c.s.pixels()) + 1;
    expect_within(got.dw, exact.dw, magnitude.dw, L, 1.0, "cudnn " + c.name + " dw");
    expect_within(got.db, exact.db, magnitude.db, L, 1.0, "cudnn " + c.name + " db");
  }
}

TEST(KernelsCudnn, Invariants) {
  expect_invariants<float>(Implementation::cudnn);
  expect_invariants<double>(Implementation::cudnn);
}

// A plan per micro-batch size: calls at sizes already seen after a larger
// one still give the same bits (the workspace only grows).
TEST(KernelsCudnn, RepeatableAcrossBatchSizesThroughOneObject) {
  const Case big{"same 3x3, 4 samples", shape(3, 9, 8, 5, 3, 3, 1, 1), 4, true};
  Case small = big;
  small.n = 1;
  const Inputs in_big = inputs(big, 1700), in_small = inputs(small, 1800);
  kernels::Conv2d<float> conv(big.s, Implementation::cudnn);
  const Outputs first = run<float>(small, Implementation::cudnn, in_small, Path::split, false, &conv);
  run<float>(big, Implementation::cudnn, in_big, Path::fused, true, &conv);
  const Outputs again = run<float>(small, Implementation::cudnn, in_small, Path::split, false, &conv);
  EXPECT_EQ(first.y, again.y);
  EXPECT_EQ(first.dx, again.dx);
  EXPECT_EQ(first.dw, again.dw);
  EXPECT_EQ(first.db, again.db);
}

// The workspace the memory model counts is the one cuDNN's object allocates:
// reserve(n) makes exactly one View of cudnn_workspace_bytes (rounded up
// to 8 bytes as every Kokkos View), none for 0 bytes; and plan_run's conv2d
// workspace at kernels: cudnn is that size at the micro-batch's rows.
TEST(KernelsCudnn, MemoryModelCountsItsWorkspace) {
  for (const ConvShape& s : {shape(3, 6, 5, 4, 3, 3, 2, 1), shape(1, 8, 8, 4, 3, 3, 1, 0), shape(16, 12, 12, 8, 5, 5, 1, 2)})
    for (std::int64_t n : {1, 4, 32}) {
      const std::int64_t want = kernels::cudnn_workspace_bytes(s, n, 4);
      EXPECT_GE(want, 0);
      memory::start_tracking();
      const std::int64_t before = memory::live_bytes();
      {
        kernels::Conv2d<float> conv(s, Implementation::cudnn);
        conv.reserve(n);
        EXPECT_EQ(memory::live_bytes() - before, want == 0 ? 0 : (want + 7) / 8 * 8) << "n " << n;
      }
      memory::stop_tracking();
    }
  if (std::getenv("GPIPE_KERNELS")) return;
  const std::string cnn =
      "seed: 1\nmodel:\n  input: [1, 8, 8]\n  layers: [{type: conv2d, filters: 4, kernel: 3}, {type: relu}, "
      "{type: flatten}, {type: dense, units: 3}]\n"
      "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
      "training: {epochs: 1, batch_size: 8, micro_batches: 2}\noptimizer: {type: sgd, lr: 0.1}\n";
  const RunPlan portable = plan_run(parse_deck("kernels: portable\n" + cnn, "deck.yaml"), 1);
  const RunPlan cudnn = plan_run(parse_deck("kernels: cudnn\n" + cnn, "deck.yaml"), 1);
  kernels::select(Choice::automatic);
  const std::int64_t bytes = kernels::cudnn_workspace_bytes(shape(1, 8, 8, 4, 3, 3, 1, 0), 4, 4);
  // portable: the columns of a micro-batch (4 x 9 taps x 36 pixels) and the weight-gradient sum (4 x 9).
  EXPECT_EQ(portable.memory[0].workspaces - cudnn.memory[0].workspaces,
            (4 * 9 * 36 + 4 * 9) * 4 - (bytes == 0 ? 0 : (bytes + 7) / 8 * 8));
}

// pipeline.tf32 on cuDNN: x all 1 + 2^-12 (TF32 keeps 10 mantissa bits: 1),
// w all ones, 16 channels x 3 x 3 taps: each output is 144 (1 + 2^-12) =
// 144.03515625 exactly in fp32 and 144 with TF32 operands. The math type is
// fixed when the Conv2d is made.
TEST(KernelsCudnn, Tf32OnlyWhenAllowedAtConstruction) {
  if (!kernels::has_tf32(Implementation::cudnn, Primitive::conv2d))
    GTEST_SKIP() << "no TF32 on this GPU (compute capability < 8.0)";
  const ConvShape s = shape(16, 6, 6, 2, 3, 3, 1, 0);
  const std::int64_t n = 2;
  const float one_plus = 1.0f + std::ldexp(1.0f, -12);
  const auto x = test::to_device(std::vector<float>(size_t(n * s.in_features()), one_plus), n, s.in_features());
  const auto w = test::to_device(std::vector<float>(size_t(s.filters * s.taps()), 1.0f), s.filters, s.taps());
  const auto outputs = [&](bool tf32) {
    kernels::set_tf32(tf32);
    kernels::Conv2d<float> conv(s, Implementation::cudnn);
    kernels::set_tf32(!tf32);  // fixed at construction: a later change does not matter
    Matrix<float> y("y", n, s.out_features());
    conv.forward(ExecSpace(), x, w, kernels::Conv2d<float>::ConstBias(), y, kernels::Conv2d<float>::Saved());
    kernels::set_tf32(false);
    return test::to_host(y);
  };
  for (float v : outputs(false)) ASSERT_EQ(v, 144.03515625f);
  for (float v : outputs(true)) ASSERT_EQ(v, 144.0f);
}

}  // namespace
}  // namespace gpipe

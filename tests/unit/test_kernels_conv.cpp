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

#include "../common/layer_harness.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/conv.hpp"

namespace gpipe {
namespace {

using kernels::Conv2d;
using kernels::ConvShape;
using kernels::Implementation;

ConvShape shape(std::int64_t C, std::int64_t H, std::int64_t W, std::int64_t F, std::int64_t KH,
                std::int64_t KW, std::int64_t S, std::int64_t P) {
  ConvShape s;
  s.channels = C;
  s.height = H;
  s.width = W;
  s.filters = F;
  s.kernel_h = KH;
  s.kernel_w = KW;
  s.stride_h = H == 1 && KH == 1 ? 1 : S;  // conv1d: no stride or padding along H
  s.stride_w = S;
  s.pad_h = H == 1 && KH == 1 ? 0 : P;
  s.pad_w = P;
  return s;
}

struct Case {
  std::string name;
  ConvShape s;
  std::int64_t n;
  bool bias;
};

std::vector<Case> edge_cases() {
  return {
      {"1x1 image, 1x1 kernel", shape(2, 1, 1, 3, 1, 1, 1, 0), 3, true},
      {"1x1 image, 3x3 kernel, same", shape(3, 1, 1, 2, 3, 3, 1, 1), 2, true},
      {"kernel = input (valid)", shape(2, 4, 4, 3, 4, 4, 1, 0), 2, true},
      {"kernel = input, 1 channel, batch 1", shape(1, 5, 5, 2, 5, 5, 1, 0), 1, false},
      {"stride 2 not dividing", shape(2, 7, 6, 3, 3, 3, 2, 0), 3, true},
      {"stride 3 with padding", shape(3, 8, 5, 2, 2, 2, 3, 1), 2, true},
      {"same 3x3, 1 channel", shape(1, 6, 7, 4, 3, 3, 1, 1), 2, true},
      {"same 5x5, batch 1", shape(3, 5, 6, 2, 5, 5, 1, 2), 1, true},
      {"valid 3x3, no bias", shape(4, 6, 5, 3, 3, 3, 1, 0), 3, false},
      {"the CNN deck's first layer", shape(1, 28, 28, 8, 3, 3, 1, 1), 2, true},
      {"conv1d, stride 2, pad 1", shape(3, 1, 9, 2, 1, 3, 2, 1), 3, true},
      {"conv1d, kernel = length, 1 channel", shape(1, 1, 6, 2, 1, 6, 1, 0), 1, true},
  };
}

std::vector<double> random_values(std::size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);  // representable in float: exact inputs
  std::vector<double> v(count);
  for (auto& e : v) e = double(u(gen));
  return v;
}

std::vector<double> absolute(std::vector<double> v) {
  for (auto& e : v) e = std::abs(e);
  return v;
}

template <class T>
Matrix<T> upload(const std::vector<double>& v, std::int64_t rows, std::int64_t cols) {
  Matrix<T> m("m", rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) h(r, c) = T(v[std::size_t(r * cols + c)]);
  Kokkos::deep_copy(m, h);
  return m;
}

template <class V>
std::vector<double> download(const V& m) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  std::vector<double> v(h.span());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(h.data()[i]);
  return v;
}

struct Inputs {
  std::vector<double> x, w, b, dy, dw0, db0;
};

Inputs inputs(const Case& c, unsigned seed) {
  const auto& s = c.s;
  Inputs in;
  in.x = random_values(std::size_t(c.n * s.in_features()), seed);
  in.w = random_values(std::size_t(s.filters * s.taps()), seed + 1);
  in.b = c.bias ? random_values(std::size_t(s.filters), seed + 2) : std::vector<double>();
  in.dy = random_values(std::size_t(c.n * s.out_features()), seed + 3);
  in.dw0 = random_values(std::size_t(s.filters * s.taps()), seed + 4);
  in.db0 = c.bias ? random_values(std::size_t(s.filters), seed + 5) : std::vector<double>();
  return in;
}

struct Outputs {
  std::vector<double> y, dx, dw, db;
};

enum class Path { split, fused, split_without_saved };

// Forward, then backward (fused or W then B), at T with `impl`; dw/db
// start as dw0/db0 and are added to when `accumulate`.
template <class T>
Outputs run(const Case& c, Implementation impl, const Inputs& in, Path path = Path::split, bool accumulate = false,
            Conv2d<T>* reuse = nullptr) {
  const auto& s = c.s;
  std::unique_ptr<Conv2d<T>> own;
  if (!reuse) own = std::make_unique<Conv2d<T>>(s, impl);
  Conv2d<T>& conv = reuse ? *reuse : *own;
  const auto x = upload<T>(in.x, c.n, s.in_features()), w = upload<T>(in.w, s.filters, s.taps());
  const auto dy = upload<T>(in.dy, c.n, s.out_features());
  Matrix<T> y("y", c.n, s.out_features()), dx("dx", c.n, s.in_features());
  auto dw = upload<T>(in.dw0, s.filters, s.taps());
  Vector<T> b("b", c.bias ? s.filters : 0), db("db", c.bias ? s.filters : 0);
  if (c.bias) {
    Kokkos::deep_copy(b, Kokkos::subview(upload<T>(in.b, 1, s.filters), 0, Kokkos::ALL));
    Kokkos::deep_copy(db, Kokkos::subview(upload<T>(in.db0, 1, s.filters), 0, Kokkos::ALL));
  }
  Vector<T> saved("saved", std::size_t(conv.saved_per_sample() * c.n));
  const typename Conv2d<T>::Saved kept(saved.data(), saved.extent(0)), none;
  const ExecSpace space;
  conv.forward(space, x, w, typename Conv2d<T>::ConstBias(b.data(), b.extent(0)), y, kept);
  const typename Conv2d<T>::Bias dbv(db.data(), db.extent(0));
  switch (path) {
    case Path::split:
      conv.backward_weights(space, x, dy, kept, dw, dbv, accumulate);
      conv.backward_data(space, dy, w, dx);
      break;
    case Path::split_without_saved:
      conv.backward_weights(space, x, dy, none, dw, dbv, accumulate);
      conv.backward_data(space, dy, w, dx);
      break;
    case Path::fused:
      conv.backward(space, x, dy, w, kept, dw, dbv, accumulate, dx);
      break;
  }
  space.fence();
  return {download(y), download(dx), download(dw), download(db)};
}

// The exact values (portable in double) and the sums of |terms| (the same
// convolution of |x|, |w|, |dy|, |b|).
struct Reference {
  Outputs exact, magnitude;
};

Reference reference(const Case& c, const Inputs& in) {
  Inputs a{absolute(in.x), absolute(in.w), absolute(in.b), absolute(in.dy), in.dw0, in.db0};
  return {run<double>(c, Implementation::portable, in), run<double>(c, Implementation::portable, a)};
}

// Each element within 2 L eps sum|terms| (times `slack`) of the exact value.
void expect_within(const std::vector<double>& got, const std::vector<double>& exact,
                   const std::vector<double>& magnitude, double length, double slack, const std::string& what) {
  ASSERT_EQ(got.size(), exact.size()) << what;
  const double eps = double(std::numeric_limits<float>::epsilon());
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = slack * 2.0 * length * eps * magnitude[i];
    if (!(std::abs(got[i] - exact[i]) <= bound) && reported++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs exact " << exact[i] << ", bound " << bound
                    << " (L = " << length << ")";
  }
}

void expect_accurate(const Case& c, const Outputs& got, const Reference& r, double slack, const std::string& who) {
  const auto& s = c.s;
  const double P = double(s.pixels()), n = double(c.n);
  const std::string at = who + ", " + c.name + ": ";
  expect_within(got.y, r.exact.y, r.magnitude.y, double(s.taps() + 1), slack, at + "y");
  expect_within(got.dx, r.exact.dx, r.magnitude.dx, double(s.filters * s.kernel_h * s.kernel_w + 1), slack, at + "dx");
  expect_within(got.dw, r.exact.dw, r.magnitude.dw, n * P, slack, at + "dw");
  expect_within(got.db, r.exact.db, r.magnitude.db, n * P, slack, at + "db");
}

std::vector<Implementation> float_implementations() {
  std::vector<Implementation> v;
  for (const auto impl : kernels::available())
    if (kernels::has(impl, kernels::Primitive::conv2d, 4)) v.push_back(impl);
  return v;
}

bool has_onednn() { return kernels::has(Implementation::onednn, kernels::Primitive::conv2d, 4); }

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

template <class T>
void expect_invariants(Implementation impl) {
  unsigned seed = 700;
  for (const Case& c : edge_cases()) {
    const Inputs in = inputs(c, seed += 10);
    const std::string at = std::string(kernels::name(impl)) + ", " + c.name;
    const Outputs split = run<T>(c, impl, in);
    const Outputs again = run<T>(c, impl, in);
    EXPECT_EQ(split.y, again.y) << at << ": repeatable";
    EXPECT_EQ(split.dw, again.dw) << at << ": repeatable";
    const Outputs fused = run<T>(c, impl, in, Path::fused);
    EXPECT_EQ(fused.y, split.y) << at;
    EXPECT_EQ(fused.dx, split.dx) << at << ": fused backward = W then B";
    EXPECT_EQ(fused.dw, split.dw) << at << ": fused backward = W then B";
    EXPECT_EQ(fused.db, split.db) << at << ": fused backward = W then B";
    const Outputs recomputed = run<T>(c, impl, in, Path::split_without_saved);
    EXPECT_EQ(recomputed.dw, split.dw) << at << ": saved columns = recomputed";
    EXPECT_EQ(recomputed.db, split.db) << at;
    // Each sample alone (n = 1, through the same object, so n = 1 gets its
    // own primitives): the same forward output and input gradient bitwise.
    Conv2d<T> one(c.s, impl);
    for (std::int64_t i = 0; i < c.n; ++i) {
      Case single = c;
      single.n = 1;
      Inputs part = in;
      const auto slice = [](const std::vector<double>& v, std::int64_t i, std::int64_t width) {
        return std::vector<double>(v.begin() + i * width, v.begin() + (i + 1) * width);
      };
      part.x = slice(in.x, i, c.s.in_features());
      part.dy = slice(in.dy, i, c.s.out_features());
      const Outputs alone = run<T>(single, impl, part, Path::split, false, &one);
      EXPECT_EQ(alone.y, slice(split.y, i, c.s.out_features())) << at << ": sample " << i << "'s output depends on n";
      EXPECT_EQ(alone.dx, slice(split.dx, i, c.s.in_features())) << at << ": sample " << i << "'s dx depends on n";
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

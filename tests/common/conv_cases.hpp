#pragma once
// Test helpers for the kernel seam's convolution (gpipe/kernels/conv.hpp),
// shared by test_kernels_conv.cpp and the vendor tests (test_kernels_cudnn.cpp):
// the edge shapes, random inputs, one forward + backward through an
// implementation, the double reference, the rounding bound of a sum of L
// terms (|computed - exact| <= 2 L eps sum|terms|, Higham 2002, eq. 3.5) and
// the invariants every implementation keeps (repeatable, fused = split,
// saved = recomputed, each sample's forward output and dx independent of n).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpipe/core/views.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/conv.hpp"

namespace gpipe::test::conv {

using kernels::Conv2d;
using kernels::ConvShape;
using kernels::Implementation;

inline ConvShape shape(std::int64_t C, std::int64_t H, std::int64_t W, std::int64_t F, std::int64_t KH,
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

inline std::vector<Case> edge_cases() {
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

inline std::vector<double> random_values(std::size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);  // representable in float: exact inputs
  std::vector<double> v(count);
  for (auto& e : v) e = double(u(gen));
  return v;
}

inline std::vector<double> absolute(std::vector<double> v) {
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

inline Inputs inputs(const Case& c, unsigned seed) {
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

inline Reference reference(const Case& c, const Inputs& in) {
  Inputs a{absolute(in.x), absolute(in.w), absolute(in.b), absolute(in.dy), in.dw0, in.db0};
  return {run<double>(c, Implementation::portable, in), run<double>(c, Implementation::portable, a)};
}

// Each element within 2 L eps sum|terms| (times `slack`) of the exact value.
inline void expect_within(const std::vector<double>& got, const std::vector<double>& exact,
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

inline void expect_accurate(const Case& c, const Outputs& got, const Reference& r, double slack, const std::string& who) {
  const auto& s = c.s;
  const double P = double(s.pixels()), n = double(c.n);
  const std::string at = who + ", " + c.name + ": ";
  expect_within(got.y, r.exact.y, r.magnitude.y, double(s.taps() + 1), slack, at + "y");
  expect_within(got.dx, r.exact.dx, r.magnitude.dx, double(s.filters * s.kernel_h * s.kernel_w + 1), slack, at + "dx");
  expect_within(got.dw, r.exact.dw, r.magnitude.dw, n * P, slack, at + "dw");
  expect_within(got.db, r.exact.db, r.magnitude.db, n * P, slack, at + "db");
}

inline std::vector<Implementation> float_implementations() {
  std::vector<Implementation> v;
  for (const auto impl : kernels::available())
    if (kernels::has(impl, kernels::Primitive::conv2d, 4)) v.push_back(impl);
  return v;
}

inline bool has_onednn() { return kernels::has(Implementation::onednn, kernels::Primitive::conv2d, 4); }

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

}  // namespace gpipe::test::conv

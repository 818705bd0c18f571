// Losses and normalizations at extreme magnitudes (1e-30 .. 1e30) in float and
// double: each result is that of its formula, computed here in long double.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/finite.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/layers/layer_norm.hpp"
#include "gpipe/layers/softmax_cross_entropy.hpp"

namespace gpipe {
namespace {

using Real = long double;

using test::labels;

// Relative error allowed: a few roundings of the precision used.
template <class T>
Real tolerance() {
  return Real(8) * Real(std::numeric_limits<T>::epsilon());
}

template <class T>
void expect_close(Real got, Real want, Real scale, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), tolerance<T>() * std::max(std::fabs(want), scale))
      << what << ": got " << double(got) << ", want " << double(want);
}

const double kMagnitudes[] = {1e-30, 1e-10, 1.0, 1e6, 1e8, 1e20, 1e30};

template <class T>
class Numerics : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Numerics, Precisions);

// The case: two equal logits of 1e8, label 1: ln 2 and (0.5, -0.5).
TYPED_TEST(Numerics, CrossEntropyOfEqualLogitsIsLn2AtEveryMagnitude) {
  using T = TypeParam;
  for (const double m : kMagnitudes)
    for (const double sign : {1.0, -1.0}) {
      const T z = T(sign * m);
      SoftmaxCrossEntropy<T> loss;
      Matrix<T> dz("dz", 1, 2);
      const LossSums s = loss.evaluate(test::to_device<T>({z, z}, 1, 2), labels({1}), T(1), dz);
      const auto g = test::to_host(dz);
      EXPECT_EQ(T(s.loss), T(std::log(2.0))) << "logits " << double(z);
      EXPECT_EQ(g[0], T(0.5)) << double(z);
      EXPECT_EQ(g[1], T(-0.5)) << double(z);
    }
}

// Rows z = m * (a_1..a_c) for several magnitudes m, against long double.
TYPED_TEST(Numerics, CrossEntropyMatchesItsFormula) {
  using T = TypeParam;
  const std::vector<double> shape = {0.3, -1.0, 0.9, 1.0, -0.2};
  const std::int64_t c = std::int64_t(shape.size());
  for (const double m : kMagnitudes)
    for (std::int32_t label = 0; label < c; ++label) {
      std::vector<T> z;
      for (const double a : shape) z.push_back(T(a * m));
      SoftmaxCrossEntropy<T> loss;
      Matrix<T> dz("dz", 1, c);
      const LossSums s = loss.evaluate(test::to_device<T>(z, 1, c), labels({label}), T(1), dz);
      Real zmax = z[0];
      for (const T v : z) zmax = std::max<Real>(zmax, v);
      Real sum = 0;
      for (const T v : z) sum += std::exp(Real(v) - zmax);
      const Real want = std::log(sum) - (Real(z[size_t(label)]) - zmax);
      expect_close<T>(s.loss, want, 1, "loss at " + std::to_string(m));
      const auto g = test::to_host(dz);
      for (std::int64_t j = 0; j < c; ++j) {
        const Real p = std::exp(Real(z[size_t(j)]) - zmax) / sum - (j == label ? 1 : 0);
        expect_close<T>(g[size_t(j)], p, 1, "gradient at " + std::to_string(m));
      }
    }
}

// Logits at the ends of float's range: the loss 6e38 is finite (in double).
TEST(NumericsFloat, CrossEntropyOfExtremeFiniteLogitsIsFinite) {
  const float big = 3e38f;
  SoftmaxCrossEntropy<float> loss;
  Matrix<float> dz("dz", 1, 2);
  const LossSums s = loss.evaluate(test::to_device<float>({big, -big}, 1, 2), labels({1}), 1.0f, dz);
  EXPECT_EQ(s.loss, 2.0 * double(big));
  const auto g = test::to_host(dz);
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], -1.0f);
}

TYPED_TEST(Numerics, CrossEntropyOfNonFiniteLogitsIsNonFinite) {
  using T = TypeParam;
  for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
    SoftmaxCrossEntropy<T> loss;
    const LossSums s =
        loss.evaluate(test::to_device<T>({T(1), bad}, 1, 2), labels({0}), T(1), Matrix<T>());
    EXPECT_FALSE(std::isfinite(s.loss)) << double(bad);
  }
}

// A non-finite activation stays non-finite (ReLU never maps NaN to 0).
TYPED_TEST(Numerics, ReluPropagatesNaN) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  auto relu = make_layer<T>(layer_shape(parse_layer("{type: relu}"), {3}));
  Matrix<T> y("y", 1, 3), dx("dx", 1, 3);
  const auto x = test::to_device<T>({nan, T(-1), T(2)}, 1, 3);
  relu->forward(PassContext{}, x, y);
  relu->backward(PassContext{}, x, test::to_device<T>({T(1), T(1), T(1)}, 1, 3), dx);
  const auto yh = test::to_host(y), dxh = test::to_host(dx);
  EXPECT_TRUE(std::isnan(yh[0]));
  EXPECT_EQ(yh[1], T(0));
  EXPECT_EQ(yh[2], T(2));
  EXPECT_TRUE(std::isnan(dxh[0]));
  EXPECT_EQ(dxh[1], T(0));
  EXPECT_EQ(dxh[2], T(1));
}

// LayerNorm forward and input gradient against long double at every magnitude.
TYPED_TEST(Numerics, LayerNormMatchesItsFormula) {
  using T = TypeParam;
  const std::vector<double> shape = {1.0, -2.0, 3.0, 4.0, 0.5};
  const std::vector<double> upstream = {0.3, -0.1, 0.7, 0.2, -0.4};
  const std::int64_t f = std::int64_t(shape.size());
  const double eps = 1e-5;
  for (const double m : kMagnitudes) {
    auto made = make_layer<T>(layer_shape(parse_layer("{type: layer_norm, eps: 1e-5}"), {f}));
    Layer<T>& layer = *made;
    Vector<T> p("p", 2 * f), g("g", 2 * f);
    layer.bind(p.data(), g.data());
    layer.initialize(0);
    std::vector<T> x;
    for (const double a : shape) x.push_back(T(a * m));
    const auto xd = test::to_device<T>(x, 1, f);
    Matrix<T> y("y", 1, f), dx("dx", 1, f);
    layer.forward(PassContext{}, xd, y);
    std::vector<T> dyv(upstream.begin(), upstream.end());
    layer.backward(PassContext{}, xd, test::to_device<T>(dyv, 1, f), dx);
    Real mean = 0, var = 0;
    for (const T v : x) mean += v;
    mean /= f;
    for (const T v : x) var += (Real(v) - mean) * (Real(v) - mean);
    var /= f;
    const Real rstd = 1 / std::sqrt(var + Real(eps));
    std::vector<Real> xhat;
    Real m1 = 0, m2 = 0;
    for (std::int64_t j = 0; j < f; ++j) {
      xhat.push_back((Real(x[size_t(j)]) - mean) * rstd);
      m1 += Real(dyv[size_t(j)]) / f;
      m2 += Real(dyv[size_t(j)]) * xhat.back() / f;
    }
    const auto yh = test::to_host(y), dxh = test::to_host(dx);
    for (std::int64_t j = 0; j < f; ++j) {
      expect_close<T>(yh[size_t(j)], xhat[size_t(j)], 1e-30L, "y at " + std::to_string(m));
      const Real want = rstd * (Real(dyv[size_t(j)]) - m1 - xhat[size_t(j)] * m2);
      expect_close<T>(dxh[size_t(j)], want, rstd, "dx at " + std::to_string(m));  // cancellation: error ~ eps rstd
    }
  }
}

// The training set's statistics (pooled mean and standard deviation).
TEST(NumericsFloat, StandardizeIsExactAtEveryMagnitude) {
  for (const double m : kMagnitudes)
    for (const double offset : {0.0, 1e6}) {
      // Values m * (offset + (1, 2, 3, 4)): |mean| >> std when offset = 1e6,
      // where E[x^2] - E[x]^2 in double loses 12 of its 16 digits.
      Dataset d;
      d.name = "x";
      d.samples = 2;
      d.features = 2;
      for (const double a : {1.0, 2.0, 3.0, 4.0}) d.inputs.push_back(float((offset + a) * m));
      Real mean = 0, var = 0;
      for (const float v : d.inputs) mean += v;
      mean /= 4;
      for (const float v : d.inputs) var += (Real(v) - mean) * (Real(v) - mean);
      const Real stddev = std::sqrt(var / 4);
      const std::vector<float> raw = d.inputs;
      Normalization norm;
      standardize(d, norm, true);
      expect_close<double>(norm.mean, mean, 0, "mean at " + std::to_string(m));
      expect_close<double>(norm.stddev, stddev, 0, "stddev at " + std::to_string(m));
      for (size_t i = 0; i < raw.size(); ++i)
        expect_close<float>(d.inputs[i], (Real(raw[i]) - mean) / stddev, 1,
                            "value at " + std::to_string(m));
    }
}

TEST(NumericsFloat, StandardizeOfConstantInputsGivesZeros) {
  Dataset d;
  d.inputs = {1e-30f, 1e-30f, 1e-30f};
  Normalization norm;
  standardize(d, norm, true);
  EXPECT_EQ(norm.stddev, 1.0);
  EXPECT_EQ(d.inputs, (std::vector<float>{0, 0, 0}));
}

// data.normalize: standardize_per_feature: each feature with its own mean
// and population standard deviation (hand values); a constant feature keeps
// std 1 and becomes 0; the test set uses the training statistics.
TEST(NumericsFloat, StandardizePerFeatureUsesEachFeaturesStatistics) {
  Dataset d;
  d.name = "x";
  d.samples = 4;
  d.features = 3;
  // feature 0: 1, 2, 3, 4 (mean 2.5, std sqrt(1.25)); feature 1: 100 x that
  // plus 1000; feature 2: constant 7.
  for (const float a : {1.0f, 2.0f, 3.0f, 4.0f})
    for (const float v : {a, 1000.0f + 100.0f * a, 7.0f}) d.inputs.push_back(v);
  Normalization norm;
  norm.mode = "standardize_per_feature";
  standardize_features(d, norm, true);
  EXPECT_EQ(norm.feature_mean, (std::vector<double>{2.5, 1250.0, 7.0}));
  EXPECT_EQ(norm.feature_std, (std::vector<double>{std::sqrt(1.25), std::sqrt(12500.0), 1.0}));
  const float z = float(1.5 / std::sqrt(1.25));  // the first sample's |z| in features 0 and 1
  EXPECT_EQ(d.inputs[0], -z);
  EXPECT_FLOAT_EQ(d.inputs[1], -z);
  EXPECT_EQ(d.inputs[2], 0.0f);
  EXPECT_EQ(d.inputs[9], z);
  Dataset test;
  test.name = "t";
  test.samples = 1;
  test.features = 3;
  test.inputs = {2.5f, 1250.0f, 8.0f};
  standardize_features(test, norm, false);
  EXPECT_EQ(test.inputs, (std::vector<float>{0.0f, 0.0f, 1.0f}));
  Dataset two;
  two.name = "two.h5";
  two.samples = 1;
  two.features = 2;
  two.inputs = {1, 2};
  try {
    standardize_features(two, norm, false);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "two.h5: 2 features per sample, but the per-feature normalization has 3");
  }
}

// first_nonfinite (gpipe/core/finite.hpp; scanned in blocks of 512): the
// first NaN / +-inf index, wherever it lies (first value, inside a block,
// a block's last value, the partial last block, several in one block and
// in several blocks), -1 for all finite (the largest finite values, -0 and
// subnormals included) and for an empty vector; float and double.
template <class T>
void check_first_nonfinite() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const std::int64_t n = 3 * 512 + 77;
  std::vector<T> base(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) base[size_t(i)] = T(i % 7) - T(3);
  base[10] = std::numeric_limits<T>::max();
  base[11] = -std::numeric_limits<T>::max();
  base[12] = std::numeric_limits<T>::denorm_min();
  base[13] = -T(0);
  const auto run = [](const std::vector<T>& h) {
    Vector<T> v("v", h.size());
    auto m = Kokkos::create_mirror_view(v);
    for (size_t i = 0; i < h.size(); ++i) m(i) = h[i];
    Kokkos::deep_copy(v, m);
    return first_nonfinite(v);
  };
  EXPECT_EQ(run(base), -1);
  EXPECT_EQ(run({}), -1);
  const std::vector<std::vector<std::pair<std::int64_t, T>>> cases = {
      {{0, nan}},      {{300, inf}},           {{511, -inf}},         {{512, nan}},
      {{n - 1, inf}},  {{3 * 512, nan}},       {{700, nan}, {600, inf}, {650, -inf}},
      {{1500, nan}, {900, inf}, {100, -inf}},  {{1024 + 5, inf}, {n - 2, nan}}};
  for (const auto& c : cases) {
    std::vector<T> h = base;
    std::int64_t want = n;
    for (const auto& [i, x] : c) {
      h[size_t(i)] = x;
      want = std::min(want, i);
    }
    EXPECT_EQ(run(h), want) << c.front().first;
  }
}

TEST(NumericsFloat, FirstNonfiniteFindsTheFirstNanOrInf) { check_first_nonfinite<float>(); }
TEST(NumericsDouble, FirstNonfiniteFindsTheFirstNanOrInf) { check_first_nonfinite<double>(); }

}  // namespace
}  // namespace gpipe

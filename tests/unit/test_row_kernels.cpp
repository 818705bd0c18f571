// The host row kernels against the team kernels they replace on host
// execution spaces (bitwise: the same additions in the same order), and
// float LayerNorm against the double one.
//   - lane_sum == team_sum, add_column_sums_by_blocks == add_column_sums_by_teams;
//   - LayerNorm forward_rows / backward_rows, RowKernel::threads == RowKernel::teams
//     (y, the saved statistics, dx, dgamma, dbeta), float and double, widths
//     around the lane count and per-token (tokens, width) inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/test_util.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/layers/layer_norm.hpp"
#include "../../src/layers/im2col.hpp"

namespace gpipe {
namespace {

// Values with a wide spread of exponents, so a changed addition order shows.
template <class T>
std::vector<T> spread(std::size_t count, std::uint64_t seed) {
  const std::vector<double> u = test::uniform(count, seed);
  std::vector<T> out;
  for (std::size_t e = 0; e < count; ++e) out.push_back(T(u[e] * std::pow(10.0, double(e % 7) - 3.0)));
  return out;
}

// Per row r of (rows, count): team_sum and lane_sum of the row (kernels in free functions for nvcc).
template <class T>
std::pair<std::vector<T>, std::vector<T>> row_sums(const Matrix<T>& m) {
  const std::int64_t rows = std::int64_t(m.extent(0)), count = std::int64_t(m.extent(1));
  Kokkos::View<T*, MemSpace> by_team("by_team", rows), by_lanes("by_lanes", rows);
  RowPolicy policy(rows, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<T>()));
  Kokkos::parallel_for(
      "test::team_sum", policy, KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t r = team.league_rank();
        const SumLanes<T> lanes(team.team_scratch(0), kSumLanes);
        const T s = team_sum<T>(team, lanes, count, [&](const std::int64_t j) { return m(r, j); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { by_team(r) = s; });
      });
  Kokkos::parallel_for(
      "test::lane_sum", Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(const std::int64_t r) {
        by_lanes(r) = lane_sum<T>(count, [&](const std::int64_t j) { return m(r, j); });
      });
  return {test::to_host(by_team), test::to_host(by_lanes)};
}

// Per row: lane_sum2 of (m, m^2 - 1) and the two lane_sums separately, (first, second) each.
template <class T>
std::vector<T> paired_sums(const Matrix<T>& m) {
  const std::int64_t rows = std::int64_t(m.extent(0)), count = std::int64_t(m.extent(1));
  Kokkos::View<T**, MemSpace> out("out", rows, 4);
  Kokkos::parallel_for(
      "test::lane_sum2", Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(const std::int64_t r) {
        const auto first = [&](const std::int64_t j) { return m(r, j); };
        const auto second = [&](const std::int64_t j) { return m(r, j) * m(r, j) - T(1); };
        const Kokkos::pair<T, T> both = lane_sum2<T>(count, first, second);
        out(r, 0) = both.first;
        out(r, 1) = lane_sum<T>(count, first);
        out(r, 2) = both.second;
        out(r, 3) = lane_sum<T>(count, second);
      });
  return test::to_host(out);
}

template <class T>
std::vector<T> column_sums(const Matrix<T>& m, bool blocks, bool accumulate) {
  const std::int64_t rows = std::int64_t(m.extent(0)), cols = std::int64_t(m.extent(1));
  Kokkos::View<T*, MemSpace> out("out", cols);
  Kokkos::deep_copy(out, T(0.25));
  const auto term = KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { return m(i, j) * T(3); };
  if (blocks)
    add_column_sums_by_blocks<T>("test::blocks", ExecSpace(), rows, cols, out, term, accumulate);
  else
    add_column_sums_by_teams<T>("test::teams", ExecSpace(), rows, cols, out, term, accumulate);
  return test::to_host(out);
}

template <class T>
class RowKernels : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RowKernels, Scalars);

TYPED_TEST(RowKernels, LaneSumIsTeamSumBitwise) {
  using T = TypeParam;
  for (const std::int64_t count : {0, 1, 5, 15, 16, 17, 33, 64, 100}) {
    const std::int64_t rows = 3;
    const auto m = test::to_device<T>(spread<T>(std::size_t(rows * count), 7 + std::uint64_t(count)), rows, count);
    const auto [team, lanes] = row_sums<T>(m);
    for (std::int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(team[size_t(r)], lanes[size_t(r)]) << "count " << count << " row " << r;
      if (count == 0) EXPECT_EQ(lanes[size_t(r)], T(0));
    }
  }
  for (const std::int64_t count : {0, 3, 16, 17, 100}) {
    const auto sums = paired_sums<T>(test::to_device<T>(spread<T>(std::size_t(2 * count), 3), 2, count));
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(sums[4 * r], sums[4 * r + 1]) << "lane_sum2 first, count " << count;
      EXPECT_EQ(sums[4 * r + 2], sums[4 * r + 3]) << "lane_sum2 second, count " << count;
    }
  }
  // Known value: 1 + 2 + ... + 100 = 5050 exactly.
  std::vector<T> ramp;
  for (int j = 1; j <= 100; ++j) ramp.push_back(T(j));
  EXPECT_EQ(row_sums<T>(test::to_device<T>(ramp, 1, 100)).second[0], T(5050));
}

TYPED_TEST(RowKernels, ColumnSumsByBlocksAreByTeamsBitwise) {
  using T = TypeParam;
  for (const std::int64_t rows : {0, 1, 15, 16, 17, 257})
    for (const std::int64_t cols : {1, 15, 16, 17, 100})
      for (const bool accumulate : {false, true}) {
        const auto m = test::to_device<T>(spread<T>(std::size_t(rows * cols), std::uint64_t(rows * 131 + cols)),
                                          rows, cols);
        const auto teams = column_sums<T>(m, false, accumulate), blocks = column_sums<T>(m, true, accumulate);
        for (std::int64_t j = 0; j < cols; ++j)
          EXPECT_EQ(teams[size_t(j)], blocks[size_t(j)])
              << rows << " x " << cols << " column " << j << " accumulate " << accumulate;
        if (rows == 0) EXPECT_EQ(blocks[0], accumulate ? T(0.25) : T(0));
      }
  // Known values: rows 0..16 of column j hold j + 1, times 3, plus the 0.25 already there.
  std::vector<T> ones;
  for (int i = 0; i < 17; ++i)
    for (int j = 0; j < 3; ++j) ones.push_back(T(j + 1));
  const auto sums = column_sums<T>(test::to_device<T>(ones, 17, 3), true, true);
  EXPECT_EQ(sums, (std::vector<T>{T(51.25), T(102.25), T(153.25)}));
}

struct LayerNormRun {
  std::vector<double> y, stats, dx, grads;
};

template <class T>
LayerNormRun run_layer_norm(const Shape& in, std::int64_t rows, const std::vector<double>& x_values,
                            const std::vector<double>& dy_values, typename LayerNorm<T>::RowKernel kernel) {
  auto made = make_layer<T>(layer_shape(parse_layer("{type: layer_norm}"), in));
  auto& layer = dynamic_cast<LayerNorm<T>&>(*made);
  const std::int64_t f = layer.width(), features = in.size(), tokens = features / f;
  Vector<T> p("p", 2 * f), g("g", 2 * f);
  layer.bind(p.data(), g.data());
  layer.initialize(0);
  // gamma, beta away from 1, 0 so both enter the results.
  std::vector<T> params;
  for (std::int64_t j = 0; j < 2 * f; ++j) params.push_back(T(0.5 + 0.01 * double(j)));
  Kokkos::deep_copy(p, Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                           params.data(), params.size()));
  Kokkos::deep_copy(g, T(0.125));  // accumulated onto
  std::vector<T> xv(x_values.begin(), x_values.end()), dyv(dy_values.begin(), dy_values.end());
  const auto x = test::to_device<T>(xv, rows, features), dy = test::to_device<T>(dyv, rows, features);
  Matrix<T> y("y", rows, features), dx("dx", rows, features);
  Vector<T> saved("saved", 2 * rows * tokens);
  PassContext ctx;
  layer.forward_rows(ctx, x, y, SavedView<T>(saved.data(), saved.extent(0)), kernel);
  layer.backward_rows(ctx, x, dy, dx, SavedView<T>(saved.data(), saved.extent(0)), kernel);
  const auto as_double = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  return {as_double(test::to_host(y)), as_double(test::to_host(saved)), as_double(test::to_host(dx)),
          as_double(test::to_host(g))};
}

TYPED_TEST(RowKernels, LayerNormThreadsAreTeamsBitwise) {
  using T = TypeParam;
  using K = typename LayerNorm<T>::RowKernel;
  const std::vector<Shape> shapes = {Shape{1}, Shape{7}, Shape{16}, Shape{17}, Shape{64}, Shape{100},
                                     Shape{16, 64}, Shape{3, 5}};
  for (const Shape& in : shapes)
    for (const double offset : {0.0, 1e4}) {
      const std::int64_t rows = 5, count = rows * in.size();
      std::vector<double> x = test::uniform(std::size_t(count), 11, -2, 2), dy = test::uniform(std::size_t(count), 12);
      for (double& v : x) v += offset;
      const LayerNormRun threads = run_layer_norm<T>(in, rows, x, dy, K::threads);
      const LayerNormRun teams = run_layer_norm<T>(in, rows, x, dy, K::teams);
      const std::string what = "input " + std::to_string(in.size()) + " offset " + std::to_string(offset);
      EXPECT_EQ(threads.y, teams.y) << what;
      EXPECT_EQ(threads.stats, teams.stats) << what;
      EXPECT_EQ(threads.dx, teams.dx) << what;
      EXPECT_EQ(threads.grads, teams.grads) << what;
    }
}

// float LayerNorm (unscaled statistics, reciprocal of sd) within a few float
// roundings of the double layer on the same float inputs, also on rows whose
// mean is 1e3 times their spread. The saved mean is rounded to float (as
// before this kernel), which moves xhat by up to |mean| eps / sd: `slack`.
TEST(RowKernelsFloat, LayerNormNearTheDoubleLayer) {
  using K = LayerNorm<float>::RowKernel;
  const Shape in{16, 64};
  const std::int64_t rows = 4, count = rows * in.size();
  const double eps = std::numeric_limits<float>::epsilon();
  for (const double offset : {0.0, 1e3}) {
    std::vector<double> x = test::uniform(std::size_t(count), 21, -2, 2), dy = test::uniform(std::size_t(count), 22);
    for (double& v : x) v = double(float(v + offset));
    for (double& v : dy) v = double(float(v));
    const LayerNormRun f = run_layer_norm<float>(in, rows, x, dy, K::threads);
    const LayerNormRun d = run_layer_norm<double>(in, rows, x, dy, LayerNorm<double>::RowKernel::threads);
    const double slack = offset * eps / 0.8;  // every row's sd is above 0.8 here
    const auto near = [&](const std::vector<double>& got, const std::vector<double>& want, double scale,
                          double extra, const char* what) {
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t e = 0; e < got.size(); ++e)
        EXPECT_LE(std::fabs(got[e] - want[e]), 8 * eps * std::max(std::fabs(want[e]), scale) + extra)
            << what << " " << e << " offset " << offset << ": " << got[e] << " vs " << want[e];
    };
    near(f.stats, d.stats, 0.0, 0.0, "stats");
    near(f.y, d.y, 1.0, 2 * slack, "y");
    near(f.dx, d.dx, 4.0, 8 * slack, "dx");
    near(f.grads, d.grads, 256.0, 64 * slack, "grads");
  }
}

// im2col_rows (one work item per row, a run of KW values per kernel row)
// against the definition, entry by entry, with padding, strides and
// rectangular kernels: a copy, so exactly equal.
std::vector<double> im2col_rows_of(const detail::Window2d& g, const Matrix<double>& x) {
  Matrix<double> cols("cols", x.extent(0) * size_t(g.pixels()), size_t(g.taps()));
  Kokkos::deep_copy(cols, -7.0);
  detail::im2col_rows<double>(ExecSpace(), g, x, cols, "test::im2col_rows");
  return test::to_host(cols);
}

TEST(RowKernelsIm2col, RowsAreTheDefinition) {
  struct Case { std::int64_t C, H, W, KH, KW, SH, SW, PH, PW; };
  for (const Case c : {Case{1, 28, 28, 7, 7, 7, 7, 0, 0}, Case{2, 5, 6, 3, 2, 2, 1, 1, 0}, Case{3, 4, 4, 4, 4, 1, 1, 0, 0},
                       Case{1, 1, 1, 1, 1, 1, 1, 0, 0}, Case{2, 3, 7, 2, 3, 1, 2, 1, 2}}) {
    detail::Window2d g;
    g.channels = c.C; g.height = c.H; g.width = c.W; g.kernel_h = c.KH; g.kernel_w = c.KW;
    g.stride_h = c.SH; g.stride_w = c.SW; g.pad_h = c.PH; g.pad_w = c.PW;
    const std::int64_t n = 2, features = c.C * c.H * c.W;
    const std::vector<double> xv = test::uniform(std::size_t(n * features), 5);
    const std::vector<double> got = im2col_rows_of(g, test::to_device<double>(xv, n, features));
    const std::int64_t P = g.pixels(), OW = g.out_w(), taps = g.taps();
    ASSERT_EQ(std::int64_t(got.size()), n * P * taps);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < P; ++p)
        for (std::int64_t ch = 0; ch < c.C; ++ch)
          for (std::int64_t a = 0; a < c.KH; ++a)
            for (std::int64_t b = 0; b < c.KW; ++b) {
              const std::int64_t h = (p / OW) * c.SH - c.PH + a, w = (p % OW) * c.SW - c.PW + b;
              const double want = (h >= 0 && h < c.H && w >= 0 && w < c.W) ? xv[size_t(i * features + (ch * c.H + h) * c.W + w)] : 0.0;
              EXPECT_EQ(got[size_t((i * P + p) * taps + (ch * c.KH + a) * c.KW + b)], want)
                  << "case C " << c.C << " H " << c.H << " W " << c.W << " sample " << i << " pixel " << p;
            }
  }
}

// pos_embed's weight gradient (by blocks of 16 features) and token_mean's
// input gradient against the same sums done here in the same order: bitwise.
TEST(RowKernelsTokens, PosEmbedAndTokenMeanGradientsBitwise) {
  const std::int64_t n = 5, tokens = 7, d = 5, F = tokens * d;  // F = 35: two full blocks and a partial one
  std::vector<float> dyv;
  for (const double v : test::uniform(std::size_t(n * F), 31)) dyv.push_back(float(v * 1e3));
  {
    auto layer = make_layer<float>(layer_shape(parse_layer("{type: pos_embed}"), {tokens, d}));
    Vector<float> p("p", F), g("g", F);
    layer->bind(p.data(), g.data());
    layer->initialize(1);
    Kokkos::deep_copy(g, 0.5f);
    Matrix<float> dx("dx", n, F);
    layer->backward(PassContext{}, Matrix<float>("x", n, F), test::to_device<float>(dyv, n, F), dx);
    const auto got = test::to_host(g), dxh = test::to_host(dx);
    for (std::int64_t e = 0; e < F; ++e) {
      float sum = 0;
      for (std::int64_t i = 0; i < n; ++i) sum += dyv[size_t(i * F + e)];
      EXPECT_EQ(got[size_t(e)], 0.5f + sum) << "feature " << e;
    }
    EXPECT_EQ(dxh, dyv);
  }
  {
    auto layer = make_layer<float>(layer_shape(parse_layer("{type: token_mean}"), {tokens, d}));
    std::vector<float> dy_mean(dyv.begin(), dyv.begin() + n * d);
    Matrix<float> dx("dx", n, F);
    layer->backward(PassContext{}, Matrix<float>("x", n, F), test::to_device<float>(dy_mean, n, d), dx);
    const auto got = test::to_host(dx);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t e = 0; e < F; ++e)
        EXPECT_EQ(got[size_t(i * F + e)], dy_mean[size_t(i * d + e % d)] / float(tokens)) << i << ", " << e;
  }
}

}  // namespace
}  // namespace gpipe

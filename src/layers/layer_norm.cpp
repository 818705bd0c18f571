#include "gpipe/layers/layer_norm.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include <limits>

#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
LayerNorm<T>::LayerNorm(const LayerShape& shape)
    : Layer<T>(shape), eps_(shape.spec.as<LayerNormConfig>().eps) {}

namespace {
// Tokens per sample: an input (tokens, width) is normalized per token.
std::int64_t tokens_of(const Shape& in) { return in.rank() == 2 ? in[0] : 1; }
}  // namespace

template <class T>
std::int64_t LayerNorm<T>::width() const {
  return this->in_features() / tokens_of(this->input_shape());
}

template <class T>
void LayerNorm<T>::bind(T* values, T* gradients) {
  const auto f = width();
  gamma_ = Unmanaged(values, f);
  beta_ = Unmanaged(values + f, f);
  gamma_grad_ = Unmanaged(gradients, f);
  beta_grad_ = Unmanaged(gradients + f, f);
}

template <class T>
void LayerNorm<T>::initialize(std::uint64_t) {
  auto g = gamma_;
  auto b = beta_;
  // instance: default (Layer::initialize takes no instance: construction, before any step)
  Kokkos::parallel_for(
      "gpipe::LayerNorm::initialize", Kokkos::RangePolicy<ExecSpace>(0, width()),
      KOKKOS_LAMBDA(const std::int64_t j) {
        g(j) = T(1);
        b(j) = T(0);
      });
}

namespace {
// One team per row, the features spread over the team's threads; every sum
// in the fixed lane order of core/fixed_sum.hpp, so the results are the same
// at any thread count, team size and backend.
template <class T>
RowPolicy row_teams(const ExecSpace& space, std::int64_t rows) {
  RowPolicy policy(space, rows, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<double>()));
  return policy;
}

// The reductions and loops of one row, done by one thread (host spaces:
// lane_sum, no team machinery per row) or by a team (GPUs: team_sum over its
// threads). The two give the same bits (fixed_sum.hpp), so one row algorithm
// below serves both.
struct ThreadRow {
  template <class Term>
  KOKKOS_INLINE_FUNCTION double sum(std::int64_t count, const Term& term) const {
    return lane_sum<double>(count, term);
  }
  template <class First, class Second>
  KOKKOS_INLINE_FUNCTION Kokkos::pair<double, double> sum2(std::int64_t count, const First& first,
                                                           const Second& second) const {
    return lane_sum2<double>(count, first, second);
  }
  template <class Term>
  KOKKOS_INLINE_FUNCTION double max(std::int64_t count, const Term& term) const {
    return lane_max_nonnegative<double>(count, term);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void each(std::int64_t count, const F& f) const {
    for (std::int64_t j = 0; j < count; ++j) f(j);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void once(const F& f) const { f(); }
};

struct TeamRow {
  const RowMember& team;
  SumLanes<double> lanes;
  KOKKOS_INLINE_FUNCTION explicit TeamRow(const RowMember& t) : team(t), lanes(t.team_scratch(0), kSumLanes) {}
  template <class Term>
  KOKKOS_INLINE_FUNCTION double sum(std::int64_t count, const Term& term) const {
    return team_sum<double>(team, lanes, count, term);
  }
  template <class First, class Second>
  KOKKOS_INLINE_FUNCTION Kokkos::pair<double, double> sum2(std::int64_t count, const First& first,
                                                           const Second& second) const {
    const double a = team_sum<double>(team, lanes, count, first);
    return {a, team_sum<double>(team, lanes, count, second)};
  }
  template <class Term>
  KOKKOS_INLINE_FUNCTION double max(std::int64_t count, const Term& term) const {
    return team_max_nonnegative<double>(team, lanes, count, term);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void each(std::int64_t count, const F& f) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), f);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void once(const F& f) const { Kokkos::single(Kokkos::PerTeam(team), f); }
};

// Whether T's squares and eps / T-range values cannot overflow or underflow
// in double: then the statistics need no scaling (float: |x| <= 3.4e38,
// squares <= 1.2e77; the smallest subnormal's square 2e-90).
template <class T>
inline constexpr bool kUnscaled = sizeof(T) < sizeof(double);

// Statistics of row i into stats(i, 0..1): mean and sqrt(var + eps), in
// double, scale-safe (DESIGN.md "Numerics"). float (kUnscaled): plain
// two-pass mean and variance of the doubles, which cannot overflow or
// underflow for any finite float. double: the row divided by its largest
// |x| (s) before anything is squared, so neither the squares nor eps / s^2
// overflow or underflow to a wrong variance at any finite magnitude. Then
// y = xhat * gamma + beta with xhat from the stored (rounded) statistics,
// as backward reads them.
template <class T, class Row, class X, class Y, class S, class G>
KOKKOS_INLINE_FUNCTION void forward_row(const Row& row, std::int64_t i, std::int64_t f, double eps, const X& x,
                                        const Y& y, const S& stats, const G& g, const G& b) {
  double mean_d, sd;
  if constexpr (kUnscaled<T>) {
    mean_d = row.sum(f, [&](const std::int64_t j) { return double(x(i, j)); }) / double(f);
    const double var = row.sum(f, [&](const std::int64_t j) {
                         const double d = double(x(i, j)) - mean_d;
                         return d * d;
                       }) / double(f);
    sd = compat::sqrt(var + eps);
  } else {
    double s = row.max(f, [&](const std::int64_t j) {
      const double a = double(x(i, j));
      return a < 0 ? -a : a;
    });
    if (!(s > 0)) s = 1;
    const double mu = row.sum(f, [&](const std::int64_t j) { return double(x(i, j)) / s; }) / double(f);
    const double var = row.sum(f, [&](const std::int64_t j) {
                         const double d = double(x(i, j)) / s - mu;
                         return d * d;
                       }) / double(f);  // variance of x / s
    // sqrt(s^2 var + eps), arranged so neither s^2 nor eps / s^2 overflows.
    sd = s >= 1 ? s * compat::sqrt(var + eps / s / s) : compat::sqrt(s * s * var + eps);
    mean_d = s * mu;
  }
  const T mean_t = T(mean_d), sd_t = T(sd);
  row.once([&]() {
    stats(i, 0) = mean_t;
    stats(i, 1) = sd_t;
  });
  const double mean = double(mean_t), dev = double(sd_t);
  if constexpr (kUnscaled<T>) {
    const double inv = 1.0 / dev;  // > 0 and normal: dev >= sqrt(eps) and <= float's largest
    row.each(f, [&](const std::int64_t j) { y(i, j) = T((double(x(i, j)) - mean) * inv) * g(j) + b(j); });
  } else {
    row.each(f, [&](const std::int64_t j) { y(i, j) = T((double(x(i, j)) - mean) / dev) * g(j) + b(j); });
  }
}

// dx row i = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sd,
// dxhat = dy * gamma, in double; float divides by multiplying with 1 / sd.
template <class T, class Row, class X, class Y, class S, class G>
KOKKOS_INLINE_FUNCTION void backward_row(const Row& row, std::int64_t i, std::int64_t f, const X& x, const X& dy,
                                         const Y& dx, const S& stats, const G& g) {
  const double mean = double(stats(i, 0)), sd = double(stats(i, 1));
  const auto dxhat = [&](const std::int64_t j) { return double(dy(i, j)) * double(g(j)); };
  if constexpr (kUnscaled<T>) {
    const double inv = 1.0 / sd;
    // m1 and m2 in one pass (the same sums as two).
    const auto sums = row.sum2(f, dxhat, [&](const std::int64_t j) {
      return double(dy(i, j)) * double(g(j)) * ((double(x(i, j)) - mean) * inv);
    });
    const double m1 = sums.first / double(f), m2 = sums.second / double(f);
    row.each(f, [&](const std::int64_t j) {
      const double xhat = (double(x(i, j)) - mean) * inv;
      dx(i, j) = T((double(dy(i, j)) * double(g(j)) - m1 - xhat * m2) * inv);
    });
  } else {
    const double m1 = row.sum(f, dxhat) / double(f);
    const double m2 = row.sum(f, [&](const std::int64_t j) {
                        return double(dy(i, j)) * double(g(j)) * (double(x(i, j)) - mean) / sd;
                      }) / double(f);
    row.each(f, [&](const std::int64_t j) {
      const double xhat = (double(x(i, j)) - mean) / sd;
      dx(i, j) = T((double(dy(i, j)) * double(g(j)) - m1 - xhat * m2) / sd);
    });
  }
}
}  // namespace

template <class T>
void LayerNorm<T>::forward(const PassContext& ctx, ConstMatrix<T> x_in, Matrix<T> y_in, SavedView<T> saved) {
  forward_rows(ctx, x_in, y_in, saved, kHostRows ? RowKernel::threads : RowKernel::teams);
}

template <class T>
void LayerNorm<T>::forward_rows(const PassContext& ctx, ConstMatrix<T> x_in, Matrix<T> y_in, SavedView<T> saved,
                                RowKernel kernel) {
  // (n, T*d) row-major is (n*T, d): one row per token.
  const std::int64_t tokens = tokens_of(this->input_shape());
  const ConstMatrix<T> x(x_in.data(), x_in.extent(0) * size_t(tokens), x_in.extent(1) / size_t(tokens));
  const Matrix<T> y(y_in.data(), y_in.extent(0) * size_t(tokens), y_in.extent(1) / size_t(tokens));
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  const auto stats = unmanaged_matrix(saved.data(), n, 2);
  const double eps = eps_;
  auto g = gamma_;
  auto b = beta_;
  if (kernel == RowKernel::threads)
    Kokkos::parallel_for(
        "gpipe::LayerNorm::forward", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { forward_row<T>(ThreadRow{}, i, f, eps, x, y, stats, g, b); });
  else
    Kokkos::parallel_for(
        "gpipe::LayerNorm::forward", row_teams<T>(ctx.space, n), KOKKOS_LAMBDA(const RowMember& team) {
          forward_row<T>(TeamRow(team), team.league_rank(), f, eps, x, y, stats, g, b);
        });
}

template <class T>
void LayerNorm<T>::backward(const PassContext& ctx, ConstMatrix<T> x_in, ConstMatrix<T> dy_in,
                            Matrix<T> dx_in, SavedView<T> saved) {
  backward_rows(ctx, x_in, dy_in, dx_in, saved, kHostRows ? RowKernel::threads : RowKernel::teams);
}

template <class T>
void LayerNorm<T>::backward_rows(const PassContext& ctx, ConstMatrix<T> x_in, ConstMatrix<T> dy_in,
                                 Matrix<T> dx_in, SavedView<T> saved, RowKernel kernel) {
  const std::int64_t tokens = tokens_of(this->input_shape());
  const auto rows = [&](const auto& v) { return v.extent(0) * size_t(tokens); };
  const auto cols = [&](const auto& v) { return v.extent(1) / size_t(tokens); };
  const ConstMatrix<T> x(x_in.data(), rows(x_in), cols(x_in));
  const ConstMatrix<T> dy(dy_in.data(), rows(dy_in), cols(dy_in));
  const Matrix<T> dx = dx_in.extent(0) > 0 ? Matrix<T>(dx_in.data(), rows(dx_in), cols(dx_in)) : Matrix<T>();
  const std::int64_t n = std::int64_t(x.extent(0)), f = std::int64_t(x.extent(1));
  const auto stats = unmanaged_matrix(saved.data(), n, 2);  // written by forward
  auto g = gamma_;
  auto dg = gamma_grad_;
  auto db = beta_grad_;
  // Parameter gradients: column sums over the rows (fixed_sum.hpp; the
  // same bits by blocks of columns on the host as by a team per column).
  // xhat as backward_row forms it (float: times 1 / sd, one division per
  // row and block of columns instead of one per element).
  const auto gamma_term = KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
    const double centered = double(x(i, j)) - double(stats(i, 0));
    T xhat;
    if constexpr (kUnscaled<T>)
      xhat = T(centered * (1.0 / double(stats(i, 1))));
    else
      xhat = T(centered / double(stats(i, 1)));
    return dy(i, j) * xhat;
  };
  const auto beta_term = KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { return dy(i, j); };
  if (kernel == RowKernel::threads) {
    add_column_sums_by_blocks<T>("gpipe::LayerNorm::backward_gamma", ctx.space, n, f, dg, gamma_term);
    add_column_sums_by_blocks<T>("gpipe::LayerNorm::backward_beta", ctx.space, n, f, db, beta_term);
  } else {
    add_column_sums_by_teams<T>("gpipe::LayerNorm::backward_gamma", ctx.space, n, f, dg, gamma_term);
    add_column_sums_by_teams<T>("gpipe::LayerNorm::backward_beta", ctx.space, n, f, db, beta_term);
  }
  if (dx.extent(0) == 0) return;
  if (kernel == RowKernel::threads)
    Kokkos::parallel_for(
        "gpipe::LayerNorm::backward_input", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { backward_row<T>(ThreadRow{}, i, f, x, dy, dx, stats, g); });
  else
    Kokkos::parallel_for(
        "gpipe::LayerNorm::backward_input", row_teams<T>(ctx.space, n), KOKKOS_LAMBDA(const RowMember& team) {
          backward_row<T>(TeamRow(team), team.league_rank(), f, x, dy, dx, stats, g);
        });
}

#define GPIPE_INSTANTIATE(T) template class LayerNorm<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

namespace {
LayerEntry layer_norm_entry() {
  LayerEntry e;
  e.name = "layer_norm";
  e.keys = {"eps"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<LayerNormConfig>();
    c->eps = k.number("eps", 1e-5, 0.0, std::numeric_limits<double>::infinity(), false, "a positive number");
    if (c->eps <= 0) k.fail("eps", fmt::format("expected a positive number, got {}", c->eps));
    return c;
  };
  e.output_shape = [](const LayerConfig&, const Shape& in) {
    if (in.rank() != 1 && in.rank() != 2) throw ShapeMismatch("(features) or (tokens, width)");
    return in;
  };
  e.parameters = [](const LayerConfig&, const Shape& in) {
    const std::int64_t f = in.size() / tokens_of(in);
    return std::vector<ParameterSpec>{{"gamma", 1, f}, {"beta", 1, f}};
  };
  e.saved = [](const LayerConfig&, const Shape& in) { return SavedSize{2 * tokens_of(in), 0}; };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    return (input_gradient ? 20.0 : 12.0) * double(batch) * double(in.size());
  };
  return with_factories<LayerNorm>(e);
}
}  // namespace

GPIPE_LAYER_ENTRIES(layer_norm) { return {layer_norm_entry()}; }

}  // namespace gpipe

// batchnorm2d: batch normalization over images (Ioffe & Szegedy 2015, alg. 1),
// per channel over the samples and pixels of one micro-batch.
//   {type: batchnorm2d, eps: 1e-5, momentum: 0.1}
// Input [C, H, W]; output the same. Parameters "gamma" (1, C) = 1 and
// "beta" (1, C) = 0. State (non-trainable, in checkpoints): "running_mean"
// (1, C) = 0 and "running_var" (1, C) = 1.
//
// Semantics in a pipeline (GPipe computes batch statistics per micro-batch):
// * training: each micro-batch of n samples is normalized with the mean and
//   biased variance of its own n*H*W values per channel; they are the saved
//   state (2C values per micro-batch) that backward reads. Then, unless the
//   pass is a re-materialization recompute, running = (1 - momentum) running
//   + momentum * statistic (the variance unbiased, n H W / (n H W - 1)), as
//   PyTorch does, once per micro-batch in micro-batch order.
// * evaluation: the running statistics.
// Invariants: every cell runs its forwards in micro-batch order 0..M-1 for
// any K, and recomputes do not update, so results are bitwise equal across K
// (any partition) and re-materialization modes at fixed M, and across a
// restart (the running statistics are in the checkpoint). Changing M changes
// the model (the statistics' sample count), as in GPipe.
// Kernels: one team per channel, its n*H*W values' sums (mean, variance,
// the two backward sums) in the fixed lane order of core/fixed_sum.hpp, in
// double; the element-wise parts spread over the team's threads.
// FLOPs per element: 7 forward, 4 (parameter gradients) + 6 (input gradient) backward.

#include <fmt/format.h>

#include <limits>

#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/layers/layer.hpp"

namespace gpipe {

namespace {

struct BatchNormConfig : LayerConfig {
  double eps = 1e-5, momentum = 0.1;
};

template <class T>
class BatchNorm2d final : public Layer<T> {
 public:
  explicit BatchNorm2d(const LayerShape& shape)
      : Layer<T>(shape), config_(shape.spec.as<BatchNormConfig>()),
        channels_(shape.input[0]), pixels_(shape.input[1] * shape.input[2]) {}

  void bind(T* values, T* gradients) override {
    gamma_ = Flat(values, channels_);
    beta_ = Flat(values + channels_, channels_);
    gamma_grad_ = Flat(gradients, channels_);
    beta_grad_ = Flat(gradients + channels_, channels_);
  }
  void bind_state(T* values) override {
    running_mean_ = Flat(values, channels_);
    running_var_ = Flat(values + channels_, channels_);
  }
  void initialize(std::uint64_t) override {
    // instance: default, the four fills (Layer::initialize takes no instance: construction)
    Kokkos::deep_copy(gamma_, T(1));
    Kokkos::deep_copy(beta_, T(0));
    Kokkos::deep_copy(running_mean_, T(0));
    Kokkos::deep_copy(running_var_, T(1));
  }

  // saved: (mean, 1/std) of channel c at 2c, 2c + 1.
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), C = channels_, HW = pixels_;
    const T eps = T(config_.eps), momentum = T(config_.momentum);
    const bool training = ctx.training, update = ctx.training && !ctx.recompute;
    auto rm = running_mean_;
    auto rv = running_var_;
    // One team per channel; the n*HW values' sums in the fixed lane order of
    // core/fixed_sum.hpp (bitwise at any thread count and team size), in double.
    RowPolicy channels(ctx.space, C, Kokkos::AUTO);
    channels.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<double>()));
    Kokkos::parallel_for(
        "gpipe::BatchNorm2d::statistics", channels, KOKKOS_LAMBDA(const RowMember& team) {
          const std::int64_t c = team.league_rank();
          if (!training) {
            Kokkos::single(Kokkos::PerTeam(team), [&]() {
              saved(2 * c) = rm(c);
              saved(2 * c + 1) = T(1) / compat::sqrt(rv(c) + eps);
            });
            return;
          }
          const SumLanes<double> lanes(team.team_scratch(0), kSumLanes);
          const std::int64_t count = n * HW;
          auto value = [&](const std::int64_t k) { return double(x(k / HW, c * HW + k % HW)); };
          const double mean = team_sum<double>(team, lanes, count, value) / double(count);
          const double var = team_sum<double>(team, lanes, count, [&](const std::int64_t k) {
                               const double d = value(k) - mean;
                               return d * d;
                             }) / double(count);
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            saved(2 * c) = T(mean);
            saved(2 * c + 1) = T(1) / compat::sqrt(T(var) + eps);
            if (update) {
              const double unbiased = count > 1 ? var * double(count) / double(count - 1) : var;
              rm(c) = (T(1) - momentum) * rm(c) + momentum * T(mean);
              rv(c) = (T(1) - momentum) * rv(c) + momentum * T(unbiased);
            }
          });
        });
    auto g = gamma_;
    auto b = beta_;
    Kokkos::parallel_for(
        "gpipe::BatchNorm2d::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {n, C * HW}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t e) {
          const std::int64_t c = e / HW;
          y(i, e) = (x(i, e) - saved(2 * c)) * saved(2 * c + 1) * g(c) + b(c);
        });
  }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), C = channels_, HW = pixels_;
    auto g = gamma_;
    auto dg = gamma_grad_;
    auto db = beta_grad_;
    const bool input_gradient = dx.extent(0) > 0;
    RowPolicy channels(ctx.space, C, Kokkos::AUTO);
    channels.set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<double>()));
    Kokkos::parallel_for(
        "gpipe::BatchNorm2d::backward", channels, KOKKOS_LAMBDA(const RowMember& team) {
          const std::int64_t c = team.league_rank(), count = n * HW;
          const SumLanes<double> lanes(team.team_scratch(0), kSumLanes);
          const T mean = saved(2 * c), rstd = saved(2 * c + 1);
          auto at = [&](const std::int64_t k) { return std::int64_t(0) + c * HW + k % HW; };
          const double sum_dy =
              team_sum<double>(team, lanes, count, [&](const std::int64_t k) { return double(dy(k / HW, at(k))); });
          const double sum_dy_xhat = team_sum<double>(team, lanes, count, [&](const std::int64_t k) {
            const std::int64_t i = k / HW, e = at(k);
            return double(dy(i, e)) * double((x(i, e) - mean) * rstd);
          });
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            dg(c) += T(sum_dy_xhat);
            db(c) += T(sum_dy);
          });
          if (!input_gradient) return;
          // dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat))
          const T scale = g(c) * rstd, m1 = T(sum_dy / double(count)), m2 = T(sum_dy_xhat / double(count));
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](const std::int64_t k) {
            const std::int64_t i = k / HW, e = at(k);
            dx(i, e) = scale * (dy(i, e) - m1 - (x(i, e) - mean) * rstd * m2);
          });
        });
  }

 private:
  using Flat = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  BatchNormConfig config_;
  std::int64_t channels_, pixels_;
  Flat gamma_, beta_, gamma_grad_, beta_grad_, running_mean_, running_var_;
};

LayerEntry batchnorm2d_entry() {
  LayerEntry e;
  e.name = "batchnorm2d";
  e.keys = {"eps", "momentum"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<BatchNormConfig>();
    c->eps = k.number("eps", 1e-5, 0.0, std::numeric_limits<double>::infinity(), false, "a positive number");
    if (c->eps <= 0) k.fail("eps", fmt::format("expected a positive number, got {}", c->eps));
    c->momentum = k.number("momentum", 0.1, 0.0, 1.0, false, "a number in [0, 1]");
    return c;
  };
  e.output_shape = [](const LayerConfig&, const Shape& in) {
    if (in.rank() != 3) throw ShapeMismatch("(channels, height, width)");
    return in;
  };
  e.parameters = [](const LayerConfig&, const Shape& in) {
    return std::vector<ParameterSpec>{{"gamma", 1, in[0]}, {"beta", 1, in[0]}};
  };
  e.state = [](const LayerConfig&, const Shape& in) {
    return std::vector<ParameterSpec>{{"running_mean", 1, in[0]}, {"running_var", 1, in[0]}};
  };
  e.saved = [](const LayerConfig&, const Shape& in) { return SavedSize{0, 2 * in[0]}; };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    return (input_gradient ? 17.0 : 11.0) * double(batch) * double(in.size());
  };
  return with_factories<BatchNorm2d>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(batchnorm2d) { return {batchnorm2d_entry()}; }

}  // namespace gpipe

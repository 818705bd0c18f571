// conv2d and conv1d: 2-D convolution (cross-correlation, as in every
// framework) over images [C, H, W], and 1-D convolution over signals [C, L]
// (the same layer with H = 1 and a 1 x K kernel), lowered to one GEMM per
// micro-batch through the one im2col/col2im of im2col.hpp.
//
// Deck: {type: conv2d, filters: F, kernel: K, stride: 1, padding: valid, bias: true}
//       {type: conv1d, ...the same keys}: input [C, L], output [F, OL],
//       weight (F, C*K) (PyTorch's Conv1d (F, C, K)).
//   padding: valid (0), same (K odd: (K-1)/2, output ceil(H/stride)), or an integer >= 0.
// Input [C, H, W]; output [F, OH, OW], OH = (H + 2 pad - K) / stride + 1 (floor).
// Parameters: "weight" (F, C*K*K) row-major (PyTorch's (F, C, K, K)), He
// uniform with fan-in C*K*K; "bias" (1, F), zero (when bias: true).
// forward:  cols = im2col(x) (C*K*K, n*P), P = OH*OW; pix = W cols (F, n*P)
//           (one KokkosBlas::gemm); y(i, f*P + p) = pix(f, i*P + p) + b(f).
// backward: dpix from dy (the same reordering); db += row sums of dpix
//           (fixed order); dW += dpix cols^T; dcols = W^T dpix; dx = col2im(dcols).
//           Split for zero-bubble schedules: W = (dpix, db, im2col, dW),
//           B = (dpix, dcols, col2im); the reordering runs in both.
// FLOPs: 2 n P C K^2 F each for forward, dW and dx (dx skipped for the
// model's first layer), plus n P F for the bias forward and again backward.
// Workspace (reserve()): cols (C*K*K, n*P) and pix (F, n*P); no saved state.

#include <fmt/format.h>

#include <cmath>

#include "gpipe/core/rng.hpp"
#include "gpipe/layers/layer.hpp"
#include "gemm.hpp"
#include "im2col.hpp"

namespace gpipe {

namespace {

struct Conv2dConfig : LayerConfig {
  std::int64_t filters = 0, kernel = 0, stride = 1, padding = 0;
  bool same = false, bias = true;
};

// The window of a conv2d ([C, H, W]) or conv1d ([C, L]: H = 1, 1 x K kernel).
detail::Window2d window(const Conv2dConfig& c, const Shape& in) {
  return detail::square_window(in, c.kernel, c.stride, c.padding);
}

// Kernels live in free functions, not in the class's private members: nvcc
// rejects an extended __host__ __device__ lambda whose enclosing function is
// private or protected (scripts/check_device_lambdas.py, a ctest test).

// dpix(f, i*P + p) = dy(i, f*P + p): dy (n, F*P) -> dpix (F, n*P).
template <class T, class DPix>
void reorder_output_gradient(const ExecSpace& space, ConstMatrix<T> dy, const DPix& dpix,
                             std::int64_t P) {
  const std::int64_t n = std::int64_t(dy.extent(0)), F = std::int64_t(dpix.extent(0));
  Kokkos::parallel_for(
      "gpipe::Conv2d::backward_output", RowPolicy(space, n * F, Kokkos::AUTO),
      KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t i = team.league_rank() / F, f = team.league_rank() % F;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, P), [&](const std::int64_t p) {
          dpix(f, i * P + p) = dy(i, f * P + p);
        });
      });
}

// db(f) (+)= sum over r of dpix(f, r), r ascending (fixed order).
template <class T, class DPix, class DB>
void bias_gradient(const ExecSpace& space, const DPix& dpix, const DB& db, bool accumulate) {
  const std::int64_t rows = std::int64_t(dpix.extent(1));
  Kokkos::parallel_for(
      "gpipe::Conv2d::backward_bias",
      Kokkos::RangePolicy<ExecSpace>(space, 0, std::int64_t(dpix.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t f) {
        T sum = T(0);
        for (std::int64_t r = 0; r < rows; ++r) sum += dpix(f, r);
        db(f) = (accumulate ? db(f) : T(0)) + sum;
      });
}

template <class T>
class Conv2d final : public Layer<T> {
 public:
  explicit Conv2d(const LayerShape& shape)
      : Layer<T>(shape), config_(shape.spec.as<Conv2dConfig>()), g_(window(config_, shape.input)) {}

  void bind(T* values, T* gradients) override {
    const auto F = config_.filters, taps = g_.taps();
    weight_ = Unmanaged(values, F, taps);
    weight_grad_ = Unmanaged(gradients, F, taps);
    if (config_.bias) {
      bias_ = Flat(values + F * taps, F);
      bias_grad_ = Flat(gradients + F * taps, F);
    }
  }

  void initialize(std::uint64_t seed) override {
    const auto F = config_.filters, taps = g_.taps();
    const double a = std::sqrt(6.0 / double(taps));
    const std::uint64_t layer = std::uint64_t(this->index());
    auto w = weight_;
    Kokkos::parallel_for(
        "gpipe::Conv2d::initialize", Kokkos::RangePolicy<ExecSpace>(0, F * taps),
        KOKKOS_LAMBDA(const std::int64_t e) {
          const double u = rng::uniform01(rng::hash(seed, rng::kInit, layer, std::uint64_t(e)));
          w(e / taps, e % taps) = T((2.0 * u - 1.0) * a);
        });
    if (config_.bias) Kokkos::deep_copy(bias_, T(0));
  }

  void reserve(std::int64_t rows) override {
    const auto P = g_.pixels();
    if (std::int64_t(cols_.extent(1)) >= rows * P) return;
    cols_ = Managed(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::cols"),
                    g_.taps(), rows * P);
    pix_ = Managed(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::pixels"),
                   config_.filters, rows * P);
  }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    const std::int64_t n = std::int64_t(x.extent(0)), P = g_.pixels(), F = config_.filters;
    reserve(n);
    const Unmanaged cols(cols_.data(), g_.taps(), n * P), pix(pix_.data(), F, n * P);
    detail::im2col<T>(g_, x, cols, "gpipe::Conv2d::im2col");
    detail::gemm(ctx.space, "N", "N", T(1), weight_, cols, T(0), pix);
    const bool has_bias = config_.bias;
    auto b = bias_;
    Kokkos::parallel_for(
        "gpipe::Conv2d::forward_output", RowPolicy(n * F, Kokkos::AUTO),
        KOKKOS_LAMBDA(const RowMember& team) {
          const std::int64_t i = team.league_rank() / F, f = team.league_rank() % F;
          const T bias = has_bias ? b(f) : T(0);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, P), [&](const std::int64_t p) {
            y(i, f * P + p) = pix(f, i * P + p) + bias;
          });
        });
  }

  // Splits (zero-bubble schedules): backward_weights is the reordering of
  // dy, db and dW (im2col of x, one gemm); backward_input the reordering,
  // dcols (one gemm) and col2im. The fused backward runs the same kernels
  // once each, in that order, so it equals W then B bitwise.
  bool splits_backward() const override { return true; }
  bool writes_gradients() const override { return true; }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    const auto dpix = output_gradient(ctx.space, dy);
    weights(ctx, x, dpix);
    input(ctx.space, dpix, dx);
  }
  void backward_input(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                      SavedView<T>) override {
    if (dx.extent(0) > 0) input(ctx.space, output_gradient(ctx.space, dy), dx);
  }
  void backward_weights(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                        SavedView<T>) override {
    weights(ctx, x, output_gradient(ctx.space, dy));
  }

 private:
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Managed = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
  using Flat = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  // dpix (F, n*P) in the pixel workspace, reordered from dy (n, F*P).
  Unmanaged output_gradient(const ExecSpace& space, ConstMatrix<T> dy) {
    const std::int64_t n = std::int64_t(dy.extent(0)), P = g_.pixels(), F = config_.filters;
    reserve(n);
    const Unmanaged dpix(pix_.data(), F, n * P);
    reorder_output_gradient<T>(space, dy, dpix, P);
    return dpix;
  }

  // db (+)= row sums of dpix (fixed order); dW (+)= dpix cols^T, cols = im2col(x);
  // written, not added, when !ctx.accumulate_gradients.
  void weights(const PassContext& ctx, ConstMatrix<T> x, const Unmanaged& dpix) {
    const std::int64_t rows = std::int64_t(dpix.extent(1));
    const bool accumulate = ctx.accumulate_gradients;
    if (config_.bias) {
      bias_gradient<T>(ctx.space, dpix, bias_grad_, accumulate);
    }
    const Unmanaged cols(cols_.data(), g_.taps(), rows);
    detail::im2col<T>(g_, x, cols, "gpipe::Conv2d::im2col");
    detail::gemm(ctx.space, "N", "T", T(1), dpix, cols, accumulate ? T(1) : T(0), weight_grad_);
  }

  // dx = col2im(W^T dpix), through the columns workspace.
  void input(const ExecSpace& space, const Unmanaged& dpix, Matrix<T> dx) {
    if (dx.extent(0) == 0) return;
    const Unmanaged cols(cols_.data(), g_.taps(), std::int64_t(dpix.extent(1)));
    detail::gemm(space, "T", "N", T(1), weight_, dpix, T(0), cols);  // cols holds dcols
    detail::col2im<T>(g_, cols, dx, "gpipe::Conv2d::col2im");
  }

  Conv2dConfig config_;
  detail::Window2d g_;
  Unmanaged weight_, weight_grad_;  // (F, C*K*K)
  Flat bias_, bias_grad_;           // (F)
  Managed cols_, pix_;              // workspace
};

// conv2d (Rank 3 input) or conv1d (Rank 2).
template <int Rank>
LayerEntry conv_entry(const char* name) {
  LayerEntry e;
  e.name = name;
  e.splits_backward = true;  // Conv2d::backward_input / backward_weights
  e.keys = {"filters", "kernel", "stride", "padding", "bias"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<Conv2dConfig>();
    c->filters = k.required_integer("filters", 1, "a positive integer");
    c->kernel = k.required_integer("kernel", 1, "a positive integer");
    c->stride = k.integer("stride", 1, 1, "a positive integer");
    c->bias = k.flag("bias", true);
    const std::string padding = k.text("padding", "valid", "same, valid or an integer >= 0");
    if (padding == "same") {
      if (c->kernel % 2 == 0)
        k.fail("padding", fmt::format("same needs an odd kernel, got kernel {}", c->kernel));
      c->same = true;
      c->padding = (c->kernel - 1) / 2;
    } else if (padding != "valid") {
      c->padding = k.integer("padding", 0, 0, "same, valid or an integer >= 0");
    }
    return c;
  };
  e.output_shape = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const Conv2dConfig&>(base);
    if (in.rank() != Rank)
      throw ShapeMismatch(Rank == 3 ? "(channels, height, width)" : "(channels, length)");
    const auto g = window(c, in);
    if (g.height + 2 * g.pad_h < g.kernel_h || g.width + 2 * c.padding < c.kernel)
      throw ShapeMismatch(fmt::format("{} of at least {} for kernel {} with padding {}",
                                      Rank == 3 ? "height and width" : "length",
                                      c.kernel - 2 * c.padding, c.kernel, c.padding));
    return Rank == 3 ? Shape{c.filters, g.out_h(), g.out_w()} : Shape{c.filters, g.out_w()};
  };
  e.parameters = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const Conv2dConfig&>(base);
    std::vector<ParameterSpec> p{{"weight", c.filters, window(c, in).taps()}};
    if (c.bias) p.push_back({"bias", 1, c.filters});
    return p;
  };
  e.flops = [](const LayerConfig& base, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    const auto& c = static_cast<const Conv2dConfig&>(base);
    const auto g = window(c, in);
    const double gemm = 2.0 * double(batch) * double(g.pixels()) * double(g.taps()) * double(c.filters);
    const double bias = c.bias ? 2.0 * double(batch) * double(g.pixels()) * double(c.filters) : 0.0;
    return (input_gradient ? 3.0 : 2.0) * gemm + bias;
  };
  return with_factories<Conv2d>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(conv2d) { return {conv_entry<3>("conv2d"), conv_entry<2>("conv1d")}; }

}  // namespace gpipe

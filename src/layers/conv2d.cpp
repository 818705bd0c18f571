// conv2d and conv1d: 2-D convolution (cross-correlation, as in every
// framework) over images [C, H, W], and 1-D convolution over signals [C, L]
// (the same layer with H = 1 and a 1 x K kernel), both through the kernel
// seam's convolution (gpipe/kernels/conv.hpp: portable im2col + GEMM, or
// oneDNN's convolution primitives; docs/design.md "Convolution lowering").
//
// Deck: {type: conv2d, filters: F, kernel: K, stride: 1, padding: valid, bias: true}
//       {type: conv1d, ...the same keys}: input [C, L], output [F, OL],
//       weight (F, C*K) (PyTorch's Conv1d (F, C, K)).
//   padding: valid (0), same (K odd: (K-1)/2, output ceil(H/stride)), or an integer >= 0.
// Input [C, H, W]; output [F, OH, OW], OH = (H + 2 pad - K) / stride + 1 (floor).
// Parameters: "weight" (F, C*K*K) row-major (PyTorch's (F, C, K, K)), He
// uniform with fan-in C*K*K; "bias" (1, F), zero (when bias: true).
// Split for zero-bubble schedules: W = backward_weights (dW, db),
// B = backward_input (dx).
// FLOPs: 2 n P C K^2 F each for forward, dW and dx (dx skipped for the
// model's first layer), plus n P F for the bias forward and again backward.
// Saved state: what the seam's implementation keeps from forward to
// backward (portable: the columns, C K^2 P per sample; oneDNN: none);
// workspace (reserve()): the implementation's.

#include <fmt/format.h>

#include <cmath>

#include "gpipe/core/rng.hpp"
#include "gpipe/layers/layer.hpp"
#include "gpipe/kernels/conv.hpp"
#include "gpipe/kernels/vendor.hpp"
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

kernels::ConvShape conv_shape(const Conv2dConfig& c, const Shape& in) {
  const auto g = window(c, in);
  kernels::ConvShape s;
  s.channels = g.channels;
  s.height = g.height;
  s.width = g.width;
  s.filters = c.filters;
  s.kernel_h = g.kernel_h;
  s.kernel_w = g.kernel_w;
  s.stride_h = g.stride_h;
  s.stride_w = g.stride_w;
  s.pad_h = g.pad_h;
  s.pad_w = g.pad_w;
  return s;
}

// The heavy work runs behind the kernel seam (gpipe/kernels/conv.hpp); the
// layer binds parameters, initializes them and maps the layer interface
// onto the seam's calls. Its kernels (initialize) live in public members:
// nvcc rejects an extended lambda in a private member function
// (scripts/check_device_lambdas.py, ctest scripts_device_lambdas).
template <class T>
class Conv2d final : public Layer<T> {
 public:
  explicit Conv2d(const LayerShape& shape)
      : Layer<T>(shape),
        config_(shape.spec.as<Conv2dConfig>()),
        conv_(conv_shape(config_, shape.input), kernels::conv2d_implementation<T>()) {}

  void bind(T* values, T* gradients) override {
    const auto F = config_.filters, taps = conv_.shape().taps();
    weight_ = Unmanaged(values, F, taps);
    weight_grad_ = Unmanaged(gradients, F, taps);
    if (config_.bias) {
      bias_ = Flat(values + F * taps, F);
      bias_grad_ = Flat(gradients + F * taps, F);
    }
  }

  void initialize(std::uint64_t seed) override {
    const auto F = config_.filters, taps = conv_.shape().taps();
    const double a = std::sqrt(6.0 / double(taps));
    const std::uint64_t layer = std::uint64_t(this->index());
    auto w = weight_;
    // instance: default, the weights and the bias (Layer::initialize takes no instance: construction)
    Kokkos::parallel_for(
        "gpipe::Conv2d::initialize", Kokkos::RangePolicy<ExecSpace>(0, F * taps),
        KOKKOS_LAMBDA(const std::int64_t e) {
          const double u = rng::uniform01(rng::hash(seed, rng::kInit, layer, std::uint64_t(e)));
          w(e / taps, e % taps) = T((2.0 * u - 1.0) * a);
        });
    if (config_.bias) Kokkos::deep_copy(bias_, T(0));  // instance: default (construction)
  }

  void reserve(std::int64_t rows) override { conv_.reserve(rows); }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override {
    conv_.forward(ctx.space, x, weight_, bias_, y, ctx.training ? columns(saved, x) : Saved());
  }

  // Splits (zero-bubble schedules): backward_weights gives dW and db,
  // backward_input dx; the fused backward runs the same kernels once each
  // (the dy reordering shared), so it equals W then B bitwise.
  bool splits_backward() const override { return true; }
  bool writes_gradients() const override { return true; }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override {
    conv_.backward(ctx.space, x, dy, weight_, columns(saved, x), weight_grad_, bias_grad_,
                   ctx.accumulate_gradients, dx);
  }
  void backward_input(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                      SavedView<T>) override {
    if (dx.extent(0) > 0) conv_.backward_data(ctx.space, dy, weight_, dx);
  }
  void backward_weights(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                        SavedView<T> saved) override {
    conv_.backward_weights(ctx.space, x, dy, columns(saved, x), weight_grad_, bias_grad_,
                           ctx.accumulate_gradients);
  }

 private:
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Flat = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Saved = typename kernels::Conv2d<T>::Saved;

  // The saved state the seam keeps from forward to backward (portable: the
  // columns, when the registry entry's saved size matched; else none, and
  // backward recomputes them).
  Saved columns(const SavedView<T>& saved, ConstMatrix<T> x) const {
    const std::int64_t need = conv_.saved_per_sample() * std::int64_t(x.extent(0));
    return need > 0 && std::int64_t(saved.extent(0)) >= need ? Saved(saved.data(), need) : Saved();
  }

  Conv2dConfig config_;
  kernels::Conv2d<T> conv_;
  Unmanaged weight_, weight_grad_;  // (F, C*K*K)
  Flat bias_, bias_grad_;           // (F), extent 0 without bias
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
  // The forward's columns, kept for backward, when the conv2d kernel at
  // float is the portable one (the shape pass knows no precision; at double
  // conv2d is always portable, and a double model whose float conv2d is
  // oneDNN recomputes its columns in backward).
  e.saved = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const Conv2dConfig&>(base);
    return SavedSize{kernels::conv2d_saved_per_sample(conv_shape(c, in), kernels::conv2d_implementation<float>()),
                     0};
  };
  // The kernel's workspace (kernels/conv_*.cpp): portable, the columns of
  // a micro-batch (n taps, pixels) and the weight-gradient sum (F, taps);
  // oneDNN, the weight and bias gradients of a micro-batch that
  // accumulates (every micro-batch after the first); cuDNN, its one
  // workspace for the three fixed algorithms at the micro-batch's rows, as
  // cuDNN sizes it (kernels::cudnn_workspace_bytes: needs a CUDA device).
  e.workspace = [](const LayerConfig& base, const Shape& in, std::int64_t rows, int scalar_bytes,
                   int micro_batches) {
    const auto& c = static_cast<const Conv2dConfig&>(base);
    const kernels::ConvShape s = conv_shape(c, in);
    const std::int64_t b = scalar_bytes;
    const kernels::Implementation impl = kernels::implementation(kernels::Primitive::conv2d, scalar_bytes);
    if (impl == kernels::Implementation::portable)
      return std::vector<std::int64_t>{s.filters * s.taps() * b, rows * s.taps() * s.pixels() * b};
    if (impl == kernels::Implementation::cudnn) {  // none allocated for 0 bytes
      const std::int64_t bytes = kernels::cudnn_workspace_bytes(s, rows, scalar_bytes);
      return bytes > 0 ? std::vector<std::int64_t>{bytes} : std::vector<std::int64_t>{};
    }
    if (micro_batches > 1) return std::vector<std::int64_t>{s.filters * s.taps() * b, s.filters * b};
    return std::vector<std::int64_t>{};
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

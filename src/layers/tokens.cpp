// Token layers of a Vision Transformer (Dosovitskiy et al. 2021, eq. 1 and
// sec. 3.1): images to tokens, a learned positional embedding, and the mean
// over tokens that feeds the classifier. Sequences are (tokens, width) per
// sample: element (t, j) is column t * width + j (layers/shape.hpp).
//
// patch_embed: {type: patch_embed, patch: p, width: d}
//   Input [C, H, W] with H and W divisible by p; output [T, d], T = (H/p)(W/p),
//   token t = row-major patch index (t = (h/p) * (W/p) + w/p).
//   Parameters "weight" (C*p*p, d) row-major (rows in (c, a, b) order, a and
//   b the row and column inside the patch) and "bias" (1, d); Glorot uniform
//   with fan (C*p*p + d), bias zero.
//   forward:  cols = im2col(x) (n*T, C*p*p) (kernel = stride = p, no padding;
//             no copy is avoided because patches are not contiguous in NCHW);
//             y as (n*T, d) = cols W + b (the Dense kernel: one gemm).
//   backward: dW += cols^T dy, db += column sums, dcols = dy W^T, dx = col2im(dcols).
//   FLOPs: those of Dense (C*p*p -> d) over n*T rows. Workspace: cols.
// pos_embed: {type: pos_embed}
//   Input [T, d]; output the same: y(i, e) = x(i, e) + P(e). Parameter
//   "weight" (T, d), uniform in [-0.02, 0.02]. dP += column sums of dy
//   (fixed order), dx = dy. FLOPs: n T d forward, n T d (+ n T d copy) backward.
// token_mean: {type: token_mean}
//   Input [T, d]; output [d]: y(i, j) = (1/T) sum_t x(i, t*d + j);
//   dx(i, t*d + j) = dy(i, j) / T. FLOPs: n T d forward, n T d backward.
// None saves state for backward.

#include <fmt/format.h>

#include "gpipe/core/rng.hpp"
#include "im2col.hpp"
#include "parts.hpp"

namespace gpipe {

namespace {

struct PatchEmbedConfig : LayerConfig {
  std::int64_t patch = 0, width = 0;
};

detail::Window2d patches(std::int64_t p, const Shape& in) {
  detail::Window2d g;
  g.channels = in[0];
  g.height = in[1];
  g.width = in[2];
  g.kernel_h = g.kernel_w = g.stride_h = g.stride_w = p;
  return g;
}

template <class T>
class PatchEmbed final : public Layer<T> {
 public:
  explicit PatchEmbed(const LayerShape& shape)
      : Layer<T>(shape),
        g_(patches(shape.spec.as<PatchEmbedConfig>().patch, shape.input)),
        proj_(detail::dense_part(g_.taps(), shape.output[1], shape.index)) {}

  void bind(T* values, T* gradients) override { proj_.bind(values, gradients); }
  void initialize(std::uint64_t seed) override { proj_.initialize(seed); }
  void reserve(std::int64_t rows) override {
    if (std::int64_t(cols_.extent(0)) >= rows * g_.pixels()) return;
    cols_ = Matrix<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::PatchEmbed::cols"),
                      rows * g_.pixels(), g_.taps());
  }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), tokens = g_.pixels();
    const auto cols = gather(ctx.space, x);
    proj_.forward(ctx, cols, detail::as_matrix(y.data(), n * tokens, y.extent(1) / tokens), saved);
  }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), tokens = g_.pixels();
    const auto cols = gather(ctx.space, x);
    const auto dtok = detail::as_const_matrix(dy.data(), n * tokens, dy.extent(1) / tokens);
    if (dx.extent(0) == 0) {
      proj_.backward(ctx, cols, dtok, Matrix<T>(), saved);
      return;
    }
    // dcols overwrites cols once dW has used them: Dense computes dW first.
    proj_.backward(ctx, cols, dtok, cols, saved);
    detail::col2im_rows<T>(ctx.space, g_, cols, dx, "gpipe::PatchEmbed::col2im");
  }

 private:
  Matrix<T> gather(const ExecSpace& space, ConstMatrix<T> x) {
    const std::int64_t n = std::int64_t(x.extent(0));
    reserve(n);
    const auto cols = detail::as_matrix(cols_.data(), n * g_.pixels(), g_.taps());
    detail::im2col_rows<T>(space, g_, x, cols, "gpipe::PatchEmbed::im2col");
    return cols;
  }

  detail::Window2d g_;
  Dense<T> proj_;
  Matrix<T> cols_;  // workspace (n*T, C*p*p)
};

template <class T>
class PosEmbed final : public Layer<T> {
 public:
  explicit PosEmbed(const LayerShape& shape) : Layer<T>(shape) {}

  void bind(T* values, T* gradients) override {
    weight_ = Flat(values, this->in_features());
    weight_grad_ = Flat(gradients, this->in_features());
  }
  void initialize(std::uint64_t seed) override {
    const std::uint64_t layer = std::uint64_t(this->index());
    auto w = weight_;
    // instance: default (Layer::initialize takes no instance: construction, before any step)
    Kokkos::parallel_for(
        "gpipe::PosEmbed::initialize", Kokkos::RangePolicy<ExecSpace>(0, this->in_features()),
        KOKKOS_LAMBDA(const std::int64_t e) {
          const double u = rng::uniform01(rng::hash(seed, rng::kInit, layer, std::uint64_t(e)));
          w(e) = T((2.0 * u - 1.0) * 0.02);
        });
  }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    auto w = weight_;
    Kokkos::parallel_for(
        "gpipe::PosEmbed::forward",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {std::int64_t(x.extent(0)), this->in_features()}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t e) { y(i, e) = x(i, e) + w(e); });
  }

  void backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    const std::int64_t n = std::int64_t(dy.extent(0));
    auto dw = weight_grad_;
    // dw(e) += sum over i in order of dy(i, e), for a block of kBlock
    // features at a time, so each row's block is read contiguously.
    constexpr std::int64_t kBlock = 16;
    const std::int64_t F = this->in_features();
    Kokkos::parallel_for(
        "gpipe::PosEmbed::backward_weight", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, (F + kBlock - 1) / kBlock),
        KOKKOS_LAMBDA(const std::int64_t block) {
          const std::int64_t e0 = block * kBlock, width = F - e0 < kBlock ? F - e0 : kBlock;
          T sum[kBlock];
          for (std::int64_t c = 0; c < kBlock; ++c) sum[c] = T(0);
          for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t c = 0; c < width; ++c) sum[c] += dy(i, e0 + c);
          for (std::int64_t c = 0; c < width; ++c) dw(e0 + c) += sum[c];
        });
    if (dx.extent(0) > 0) Kokkos::deep_copy(ctx.space, dx, dy);
  }
  bool reads_input_in_backward() const override { return false; }  // dw += sum dy, dx = dy

 private:
  using Flat = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Flat weight_, weight_grad_;  // (T*d)
};

template <class T>
class TokenMean final : public Layer<T> {
 public:
  explicit TokenMean(const LayerShape& shape) : Layer<T>(shape) {}

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    const std::int64_t tokens = this->input_shape()[0], d = this->input_shape()[1];
    Kokkos::parallel_for(
        "gpipe::TokenMean::forward",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {std::int64_t(x.extent(0)), d}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
          T sum = T(0);
          for (std::int64_t t = 0; t < tokens; ++t) sum += x(i, t * d + j);
          y(i, j) = sum / T(tokens);
        });
  }

  void backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    if (dx.extent(0) == 0) return;
    const std::int64_t tokens = this->input_shape()[0], d = this->input_shape()[1];
    Kokkos::parallel_for(
        "gpipe::TokenMean::backward",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {std::int64_t(dx.extent(0)), tokens}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t t) {
          for (std::int64_t j = 0; j < d; ++j) dx(i, t * d + j) = dy(i, j) / T(tokens);
        });
  }
  bool reads_input_in_backward() const override { return false; }
};

void require_tokens(const Shape& in) {
  if (in.rank() != 2) throw ShapeMismatch("(tokens, width); put patch_embed before it");
}

LayerEntry patch_embed_entry() {
  LayerEntry e;
  e.name = "patch_embed";
  e.keys = {"patch", "width"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<PatchEmbedConfig>();
    c->patch = k.required_integer("patch", 1, "a positive integer");
    c->width = k.required_integer("width", 1, "a positive integer");
    return c;
  };
  e.output_shape = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const PatchEmbedConfig&>(base);
    if (in.rank() != 3) throw ShapeMismatch("(channels, height, width)");
    if (in[1] % c.patch != 0 || in[2] % c.patch != 0)
      throw ShapeMismatch(fmt::format("height and width divisible by patch {}", c.patch));
    return Shape{(in[1] / c.patch) * (in[2] / c.patch), c.width};
  };
  e.parameters = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const PatchEmbedConfig&>(base);
    return std::vector<ParameterSpec>{{"weight", in[0] * c.patch * c.patch, c.width}, {"bias", 1, c.width}};
  };
  // reserve(rows): the patches' columns (n T, C p p).
  e.workspace = [](const LayerConfig& base, const Shape& in, std::int64_t rows, int scalar_bytes, int) {
    const auto& c = static_cast<const PatchEmbedConfig&>(base);
    const detail::Window2d g = patches(c.patch, in);
    return std::vector<std::int64_t>{rows * g.pixels() * g.taps() * scalar_bytes};
  };
  // backward()'s one Dense product over n T token rows: x the columns (C p p), dy the tokens' gradients (width).
  e.reused_operands = [](const LayerConfig& base, const Shape& in, std::int64_t rows) {
    const auto& c = static_cast<const PatchEmbedConfig&>(base);
    const detail::Window2d g = patches(c.patch, in);
    return ReusedOperands{rows * g.pixels() * g.taps(), rows * g.pixels() * c.width};
  };
  e.flops = [](const LayerConfig& base, const Shape& in, const Shape& out, std::int64_t batch,
               bool input_gradient) {
    const auto& c = static_cast<const PatchEmbedConfig&>(base);
    return detail::dense_part(in[0] * c.patch * c.patch, c.width, 0).flops(batch * out[0], input_gradient);
  };
  return with_factories<PatchEmbed>(e);
}

LayerEntry pos_embed_entry() {
  LayerEntry e;
  e.name = "pos_embed";
  e.output_shape = [](const LayerConfig&, const Shape& in) {
    require_tokens(in);
    return in;
  };
  e.parameters = [](const LayerConfig&, const Shape& in) {
    return std::vector<ParameterSpec>{{"weight", in[0], in[1]}};
  };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch, bool input_gradient) {
    return (input_gradient ? 3.0 : 2.0) * double(batch) * double(in.size());
  };
  return with_factories<PosEmbed>(e);
}

LayerEntry token_mean_entry() {
  LayerEntry e;
  e.name = "token_mean";
  e.output_shape = [](const LayerConfig&, const Shape& in) {
    require_tokens(in);
    return Shape{in[1]};
  };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch, bool input_gradient) {
    return (input_gradient ? 2.0 : 1.0) * double(batch) * double(in.size());
  };
  return with_factories<TokenMean>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(tokens) { return {patch_embed_entry(), pos_embed_entry(), token_mean_entry()}; }

}  // namespace gpipe

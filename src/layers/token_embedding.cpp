// token_embedding: {type: token_embedding, vocabulary: V, width: d}
//   The input layer of a language model (GPT, Radford et al. 2018; "Attention
//   is all you need", Vaswani et al. 2017, sec. 3.4). Input [T]: T token ids
//   per sample, one per column, stored as floating-point values (exact
//   integers; data.format: tokens stages them so). Output [T, d]:
//   y(i, t*d + j) = E(id(i, t), j). Parameter "weight" E (V, d) row-major,
//   uniform in [-0.02 sqrt 3, 0.02 sqrt 3] (standard deviation 0.02, GPT-2's).
//   forward: a gather; an id that is not an integer in [0, V) throws
//            PipelineError naming the count and V (its row is set to NaN first).
//   backward: dE(v, j) += sum over (i, t) with id(i, t) = v of dy(i, t*d + j),
//            one thread per column j adding the tokens in their order (no
//            atomics: bitwise the same on every backend and thread count);
//            dx = 0 (ids have no gradient; the layer is normally the model's
//            first, where dx is not computed).
//   FLOPs: n T d (the gradient's additions). No saved state.

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "gpipe/core/error.hpp"
#include "gpipe/core/rng.hpp"
#include "gpipe/layers/layer.hpp"

namespace gpipe {

namespace {

struct TokenEmbeddingConfig : LayerConfig {
  std::int64_t vocabulary = 0, width = 0;
};

template <class T>
class TokenEmbedding final : public Layer<T> {
 public:
  explicit TokenEmbedding(const LayerShape& shape)
      : Layer<T>(shape),
        vocabulary_(shape.spec.as<TokenEmbeddingConfig>().vocabulary),
        width_(shape.spec.as<TokenEmbeddingConfig>().width) {}

  void bind(T* values, T* gradients) override {
    weight_ = Unmanaged(values, vocabulary_, width_);
    weight_grad_ = Unmanaged(gradients, vocabulary_, width_);
  }

  void initialize(std::uint64_t seed) override {
    const std::uint64_t layer = std::uint64_t(this->index());
    const double a = 0.02 * std::sqrt(3.0);
    const std::int64_t d = width_;
    auto w = weight_;
    // instance: default (Layer::initialize takes no instance: construction, before any step)
    Kokkos::parallel_for(
        "gpipe::TokenEmbedding::initialize", Kokkos::RangePolicy<ExecSpace>(0, vocabulary_ * d),
        KOKKOS_LAMBDA(const std::int64_t e) {
          const double u = rng::uniform01(rng::hash(seed, rng::kInit, layer, std::uint64_t(e)));
          w(e / d, e % d) = T((2.0 * u - 1.0) * a);
        });
  }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    const std::int64_t n = std::int64_t(x.extent(0)), tokens = std::int64_t(x.extent(1));
    const std::int64_t d = width_, V = vocabulary_;
    auto w = weight_;
    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::int64_t bad = 0;
    Kokkos::parallel_reduce(
        "gpipe::TokenEmbedding::forward", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, n * tokens),
        KOKKOS_LAMBDA(const std::int64_t k, std::int64_t& count) {
          const std::int64_t i = k / tokens, t = k % tokens;
          const T v = x(i, t);
          const bool ok = v >= T(0) && v < T(V) && v == T(std::int64_t(v));
          const std::int64_t id = ok ? std::int64_t(v) : 0;
          for (std::int64_t j = 0; j < d; ++j) y(i, t * d + j) = ok ? w(id, j) : nan;
          if (!ok) ++count;
        },
        bad);  // a host scalar: the reduction completes before this returns
    if (bad > 0)
      throw PipelineError(fmt::format("token_embedding (layer {}): {} input id(s) are not integers in "
                                      "[0, {}) (the layer's vocabulary)",
                                      this->index(), bad, V));
  }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    const std::int64_t n = std::int64_t(x.extent(0)), tokens = std::int64_t(x.extent(1));
    const std::int64_t d = width_;
    auto dw = weight_grad_;
    Kokkos::parallel_for(
        "gpipe::TokenEmbedding::backward_weight", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, d),
        KOKKOS_LAMBDA(const std::int64_t j) {
          for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t t = 0; t < tokens; ++t) dw(std::int64_t(x(i, t)), j) += dy(i, t * d + j);
        });
    if (dx.extent(0) > 0) Kokkos::deep_copy(ctx.space, dx, T(0));
  }

 private:
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  std::int64_t vocabulary_, width_;
  Unmanaged weight_, weight_grad_;  // (V, d)
};

LayerEntry token_embedding_entry() {
  LayerEntry e;
  e.name = "token_embedding";
  e.keys = {"vocabulary", "width"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<TokenEmbeddingConfig>();
    c->vocabulary = k.required_integer("vocabulary", 2, "an integer >= 2");
    c->width = k.required_integer("width", 1, "a positive integer");
    return c;
  };
  e.output_shape = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const TokenEmbeddingConfig&>(base);
    if (in.rank() != 1) throw ShapeMismatch("(tokens): one token id per column (data.format: tokens)");
    return Shape{in[0], c.width};
  };
  e.parameters = [](const LayerConfig& base, const Shape&) {
    const auto& c = static_cast<const TokenEmbeddingConfig&>(base);
    return std::vector<ParameterSpec>{{"weight", c.vocabulary, c.width}};
  };
  e.flops = [](const LayerConfig&, const Shape&, const Shape& out, std::int64_t batch, bool) {
    return double(batch) * double(out.size());
  };
  return with_factories<TokenEmbedding>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(token_embedding) { return {token_embedding_entry()}; }

}  // namespace gpipe

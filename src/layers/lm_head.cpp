// lm_head: {type: lm_head, vocabulary: V, tie: token_embedding}
//   The output layer of a language model: V logits per token. Input [T, d],
//   output [T, V]: y(i, t*V + v) = sum_j x(i, t*d + j) W(v, j), no bias (GPT-2's
//   head). Parameter "weight" W (V, d) row-major: the layout of
//   token_embedding's E, so the two can be one matrix (tied embeddings,
//   Press & Wolf 2017); uniform in [-0.02 sqrt 3, 0.02 sqrt 3] (standard
//   deviation 0.02, GPT-2's initialization of its tied head), so a fresh
//   model's logits are small and its loss starts near log V.
//   forward:  Y (nT, V) = X (nT, d) W^T (one gemm over every token of the micro-batch).
//   backward: dW += dY^T X, dX = dY W (two gemms).
//   FLOPs: 2 nT d V forward, 2 nT d V per gradient. No saved state.
//   Loss: model.loss token_cross_entropy reads its [T, V] output per token.
//   tie: token_embedding (optional): W and the model's token_embedding E are
//   one parameter (layers/tied.hpp): on one rank the Runner binds W to E's
//   values (one matrix; the layer does not know it), on two Pipeline starts
//   W from E and sums the two gradients before every update, so they stay
//   bitwise equal.

#include <fmt/format.h>

#include <cmath>

#include "gpipe/core/rng.hpp"
#include "gpipe/kernels/gemm.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/layers/layer.hpp"
#include "gpipe/layers/tied.hpp"
#include "parts.hpp"

namespace gpipe {

namespace {

struct LmHeadConfig : LayerConfig {
  std::int64_t vocabulary = 0;
  bool tie = false;  // tie: token_embedding
};

template <class T>
class LmHead final : public Layer<T> {
 public:
  explicit LmHead(const LayerShape& shape)
      : Layer<T>(shape), vocabulary_(shape.spec.as<LmHeadConfig>().vocabulary), width_(shape.input[1]) {}

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
        "gpipe::LmHead::initialize", Kokkos::RangePolicy<ExecSpace>(0, vocabulary_ * d),
        KOKKOS_LAMBDA(const std::int64_t e) {
          const double u = rng::uniform01(rng::hash(seed, rng::kInit, layer, std::uint64_t(e)));
          w(e / d, e % d) = T((2.0 * u - 1.0) * a);
        });
  }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    const std::int64_t rows = std::int64_t(x.extent(0)) * tokens();
    kernels::gemm<T>(ctx.space, kernels::Op::none, kernels::Op::transpose, T(1),
                     detail::as_const_matrix(x.data(), rows, width_), weight_, T(0),
                     detail::as_matrix(y.data(), rows, vocabulary_));
  }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    const std::int64_t rows = std::int64_t(x.extent(0)) * tokens();
    const auto dtok = detail::as_const_matrix(dy.data(), rows, vocabulary_);
    kernels::gemm<T>(ctx.space, kernels::Op::transpose, kernels::Op::none, T(1), dtok,
                     detail::as_const_matrix(x.data(), rows, width_), T(1), weight_grad_);
    if (dx.extent(0) > 0)
      kernels::gemm<T>(ctx.space, kernels::Op::none, kernels::Op::none, T(1), dtok, weight_, T(0),
                       detail::as_matrix(dx.data(), rows, width_));
  }

 private:
  std::int64_t tokens() const { return this->input_shape()[0]; }
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  std::int64_t vocabulary_, width_;
  Unmanaged weight_, weight_grad_;  // (V, d)
};

LayerEntry lm_head_entry() {
  LayerEntry e;
  e.name = "lm_head";
  e.keys = {"vocabulary", "tie"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<LmHeadConfig>();
    c->vocabulary = k.required_integer("vocabulary", 2, "an integer >= 2");
    if (k.has("tie")) {
      const auto tie = k.text("tie", "", "token_embedding");
      if (tie != "token_embedding")
        k.fail("tie", fmt::format("expected token_embedding (the layer whose weight the head shares), got '{}'", tie));
      c->tie = true;
    }
    return c;
  };
  e.output_shape = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const LmHeadConfig&>(base);
    if (in.rank() != 2) throw ShapeMismatch("(tokens, width); put token_embedding before it");
    return Shape{in[0], c.vocabulary};
  };
  e.parameters = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const LmHeadConfig&>(base);
    return std::vector<ParameterSpec>{{"weight", c.vocabulary, in[1]}};
  };
  e.flops = [](const LayerConfig& base, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    const auto& c = static_cast<const LmHeadConfig&>(base);
    return (input_gradient ? 6.0 : 4.0) * double(batch) * double(in[0]) * double(in[1]) * double(c.vocabulary);
  };
  return with_factories<LmHead>(e);
}

}  // namespace

TiedLayers tied_layers(const ModelSpec& model) {
  TiedLayers t;
  for (int i = 0; i < int(model.layers.size()); ++i) {
    const auto& l = model.layers[size_t(i)];
    if (l.type == "token_embedding" && t.embedding < 0) t.embedding = i;
    if (l.type != "lm_head" || !l.as<LmHeadConfig>().tie) continue;
    if (t.head >= 0)
      throw InputError(fmt::format("{}: lm_head: tie: a second lm_head ties (layer {} already does)", l.where,
                                   t.head));
    t.head = i;
  }
  if (!t.tied()) return TiedLayers{};
  const auto& head = model.layers[size_t(t.head)];
  if (t.embedding < 0)
    throw InputError(fmt::format("{}: lm_head: tie: token_embedding, but the model has no token_embedding",
                                 head.where));
  const auto shapes = model_shapes(model);
  const auto& e = shapes[size_t(t.embedding)].parameters[0];
  const auto& h = shapes[size_t(t.head)].parameters[0];
  if (e.rows != h.rows || e.cols != h.cols)
    throw InputError(fmt::format("{}: lm_head: tie: its weight ({}, {}) and token_embedding's (layer {}: ({}, "
                                 "{})) must have the same shape (vocabulary, width)",
                                 head.where, h.rows, h.cols, t.embedding, e.rows, e.cols));
  return t;
}

GPIPE_LAYER_ENTRIES(lm_head) { return {lm_head_entry()}; }

}  // namespace gpipe

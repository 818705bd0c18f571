// transformer_block: one pre-LayerNorm Transformer encoder block (Vaswani et
// al. 2017; pre-LN as in Xiong et al. 2020 and ViT, Dosovitskiy et al. 2021,
// eq. 2-3), on sequences (tokens, width) per sample:
//   x1 = x  + Drop(Attn(LN1(x)))        Attn = multi-head self-attention
//   y  = x1 + Drop(W2 GELU(W1 LN2(x1) + b1) + b2)
// Deck: {type: transformer_block, heads: H, hidden: 4d, dropout: 0, causal: false}
// Input [T, d] with d divisible by H (head width dh = d / H); output the same.
//
// Layout: the micro-batch's n samples are the (n*T, d) row-major matrix of
// their tokens, so every projection is one Dense gemm over n*T rows (the
// existing Dense, LayerNorm, GELU and Dropout layers are the block's parts).
// qkv (n*T, 3d): token row [q | k | v], head h in columns h*dh..h*dh+dh-1 of
// each. Attention through the kernel seam (gpipe/kernels/attention.hpp:
// strided-batched GEMMs over every (sample, head) on qkv, no copies):
//   S = Q K^T / sqrt(dh); causal: S(t, s) = -inf for s > t; P =
//   softmax_rows(S) (the maximum of each row is subtracted before exp);
//   O = P V, written to columns h*dh.. of o (n*T, d).
// Backward: dV = P^T dO; dP = dO V^T; dS = P .* (dP - rowsum(P .* dP));
//   dQ = dS K / sqrt(dh); dK = dS^T Q / sqrt(dh).
// Deck key causal (default false): token t attends to tokens 0..t only
// (a decoder block for language models, Radford et al. 2018).
//
// Parameters (storage order; each a part's "weight"/"bias" or "gamma"/"beta"):
//   ln1_gamma, ln1_beta (1, d); qkv_weight (d, 3d), qkv_bias (1, 3d);
//   proj_weight (d, d), proj_bias (1, d); ln2_gamma, ln2_beta (1, d);
//   mlp1_weight (d, hidden), mlp1_bias (1, hidden); mlp2_weight (hidden, d),
//   mlp2_bias (1, d). Weights Glorot uniform, biases 0, gamma 1, beta 0.
// Saved state per sample: T * (4 + 7d + 2 hidden) + H * T * T elements:
//   regions of the micro-batch in order stats1 (n*T, 2), h1 = LN1(x) (n*T, d),
//   qkv (n*T, 3d), P (n, H, T, T), o (n*T, d), x1 (n*T, d), stats2 (n*T, 2),
//   h2 = LN2(x1) (n*T, d), u = W1 h2 + b1 (n*T, hidden), GELU(u) (n*T, hidden).
// backward() reads them and recomputes nothing (only Dropout masks, which
// are counter-based: keyed by (seed, step, part key, sample, column) as the
// dropout layer keys them, so a re-materialized forward repeats them).
// FLOPs: the parts' (LayerNorms, Dense projections, GELU, Dropouts) over
// n*T rows, plus attention 4 n T^2 d + 5 n H T^2 forward and 8 n T^2 d +
// 4 n H T^2 backward, plus 2 n T d for each residual pass.
// Workspace (reserve()): 3 (n*T, d), one (n*T, 3d), one (n*T, hidden) and
// one (n, H, T, T) buffer; nothing is held between forward() and backward().

#include <fmt/format.h>

#include <algorithm>

#include "gpipe/kernels/attention.hpp"
#include "gpipe/layers/activations.hpp"
#include "parts.hpp"

namespace gpipe {

namespace {

struct BlockConfig : LayerConfig {
  std::int64_t heads = 1, hidden = 0;  // hidden 0: 4 * width
  double dropout = 0;
  bool causal = false;
};

std::int64_t hidden_width(const BlockConfig& c, std::int64_t d) { return c.hidden > 0 ? c.hidden : 4 * d; }

// The parts of a block at model position `index` on input [T, d].
struct Parts {
  LayerShape ln1, qkv, proj, ln2, mlp1, gelu, mlp2, drop_attention, drop_mlp;
};

Parts parts(const BlockConfig& c, const Shape& in, std::int64_t index) {
  const std::int64_t T = in[0], d = in[1], m = hidden_width(c, d);
  Parts p;
  p.ln1 = detail::layer_norm_part(d, detail::part_key(index, 0));
  p.qkv = detail::dense_part(d, 3 * d, detail::part_key(index, 1));
  p.proj = detail::dense_part(d, d, detail::part_key(index, 2));
  p.ln2 = detail::layer_norm_part(d, detail::part_key(index, 3));
  p.mlp1 = detail::dense_part(d, m, detail::part_key(index, 4));
  p.gelu = detail::part_shape("gelu", nullptr, Shape{m}, detail::part_key(index, 5));
  p.mlp2 = detail::dense_part(m, d, detail::part_key(index, 6));
  p.drop_attention = detail::dropout_part(T * d, c.dropout, detail::part_key(index, 7));
  p.drop_mlp = detail::dropout_part(T * d, c.dropout, detail::part_key(index, 8));
  return p;
}

// Offsets of the saved regions for a micro-batch of n samples (see above).
struct SavedLayout {
  std::int64_t stats1, h1, qkv, probs, o, x1, stats2, h2, u, g, end;
  SavedLayout(std::int64_t n, std::int64_t T, std::int64_t d, std::int64_t m, std::int64_t H) {
    const std::int64_t N = n * T;
    stats1 = 0;
    h1 = stats1 + 2 * N;
    qkv = h1 + N * d;
    probs = qkv + 3 * N * d;
    o = probs + n * H * T * T;
    x1 = o + N * d;
    stats2 = x1 + N * d;
    h2 = stats2 + 2 * N;
    u = h2 + N * d;
    g = u + N * m;
    end = g + N * m;
  }
};

// out = a + b, element-wise over contiguous matrices (the residual connections).
template <class T>
void add(const ExecSpace& space, const char* label, const T* a, const T* b, T* out, std::int64_t count) {
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, count),
      KOKKOS_LAMBDA(const std::int64_t e) { out[e] = a[e] + b[e]; });
}

template <class T>
class TransformerBlock final : public Layer<T> {
 public:
  explicit TransformerBlock(const LayerShape& shape)
      : TransformerBlock(shape, shape.spec.as<BlockConfig>(), parts(shape.spec.as<BlockConfig>(), shape.input, shape.index)) {}

  void bind(T* values, T* gradients) override {
    std::int64_t offset = 0;
    for (Layer<T>* part : params()) {
      part->bind(values + offset, gradients + offset);
      offset += part->parameter_count();
    }
  }
  void initialize(std::uint64_t seed) override {
    for (Layer<T>* part : params()) part->initialize(seed);
  }
  void reserve(std::int64_t rows) override {
    if (rows <= capacity_) return;
    capacity_ = rows;
    const std::int64_t N = rows * T_;
    const auto alloc = [](const char* label, std::int64_t count) {
      return Vector<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), count);
    };
    buf_a_ = alloc("gpipe::TransformerBlock::work_a", N * d_);
    buf_b_ = alloc("gpipe::TransformerBlock::work_b", N * d_);
    buf_c_ = alloc("gpipe::TransformerBlock::work_c", N * d_);
    buf_qkv_ = alloc("gpipe::TransformerBlock::work_qkv", 3 * N * d_);
    buf_m_ = alloc("gpipe::TransformerBlock::work_hidden", N * m_);
    buf_p_ = alloc("gpipe::TransformerBlock::work_probs", rows * H_ * T_ * T_);
  }

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), N = n * T_;
    reserve(n);
    N_ = N;
    const SavedLayout at(n, T_, d_, m_, H_);
    T* s = saved.data();
    const auto X = detail::as_const_matrix(x.data(), N, d_);
    ln1_.forward(ctx, X, rows(s + at.h1, d_), SavedView<T>(s + at.stats1, 2 * N));
    qkv_.forward(ctx, rows(s + at.h1, d_), rows(s + at.qkv, 3 * d_), SavedView<T>());
    kernels::attention_forward<T>(ctx.space, attention(n), rows(s + at.qkv, 3 * d_),
                                  detail::as_matrix(s + at.probs, n * H_ * T_, T_), rows(s + at.o, d_));
    proj_.forward(ctx, rows(s + at.o, d_), rows(buf_a_.data(), d_), SavedView<T>());
    add(ctx.space, "gpipe::TransformerBlock::residual_attention", x.data(), dropped(ctx, drop_attention_, buf_a_.data(), n), s + at.x1, N * d_);
    ln2_.forward(ctx, rows(s + at.x1, d_), rows(s + at.h2, d_), SavedView<T>(s + at.stats2, 2 * N));
    mlp1_.forward(ctx, rows(s + at.h2, d_), rows(s + at.u, m_), SavedView<T>());
    gelu_.forward(ctx, rows(s + at.u, m_), rows(s + at.g, m_), SavedView<T>());
    mlp2_.forward(ctx, rows(s + at.g, m_), rows(buf_a_.data(), d_), SavedView<T>());
    add(ctx.space, "gpipe::TransformerBlock::residual_mlp", s + at.x1, dropped(ctx, drop_mlp_, buf_a_.data(), n), y.data(), N * d_);
  }

  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), N = n * T_;
    reserve(n);
    N_ = N;
    const SavedLayout at(n, T_, d_, m_, H_);
    T* s = saved.data();
    T *a = buf_a_.data(), *b = buf_b_.data(), *c = buf_c_.data(), *hid = buf_m_.data();
    // MLP branch: dy -> dz (Dropout) -> d GELU(u) -> du -> dh2 -> dx1 via LN2.
    const T* dz = undropped(ctx, drop_mlp_, dy.data(), a, n);
    mlp2_.backward(ctx, rows(s + at.g, m_), rows(dz, d_), rows(hid, m_), SavedView<T>());
    gelu_.backward(ctx, rows(s + at.u, m_), rows(hid, m_), rows(hid, m_), SavedView<T>());
    mlp1_.backward(ctx, rows(s + at.h2, d_), rows(hid, m_), rows(b, d_), SavedView<T>());
    ln2_.backward(ctx, rows(s + at.x1, d_), rows(b, d_), rows(a, d_), SavedView<T>(s + at.stats2, 2 * N));
    add(ctx.space, "gpipe::TransformerBlock::residual_mlp_backward", dy.data(), a, a, N * d_);  // a = dx1
    // Attention branch: dx1 -> da (Dropout) -> do -> dqkv -> dh1 -> dx via LN1.
    const T* da = undropped(ctx, drop_attention_, a, b, n);
    proj_.backward(ctx, rows(s + at.o, d_), rows(da, d_), rows(c, d_), SavedView<T>());
    kernels::attention_backward<T>(ctx.space, attention(n), rows(static_cast<const T*>(s + at.qkv), 3 * d_),
                                   detail::as_const_matrix<T>(s + at.probs, n * H_ * T_, T_),
                                   rows(static_cast<const T*>(c), d_),
                                   detail::as_matrix(buf_p_.data(), n * H_ * T_, T_), rows(buf_qkv_.data(), 3 * d_));
    qkv_.backward(ctx, rows(s + at.h1, d_), rows(buf_qkv_.data(), 3 * d_), rows(b, d_), SavedView<T>());
    const auto X = detail::as_const_matrix(x.data(), N, d_);
    if (dx.extent(0) == 0) {  // the model's first layer: LN1's parameter gradients only
      ln1_.backward(ctx, X, rows(b, d_), Matrix<T>(), SavedView<T>(s + at.stats1, 2 * N));
      return;
    }
    ln1_.backward(ctx, X, rows(b, d_), rows(dx.data(), d_), SavedView<T>(s + at.stats1, 2 * N));
    add(ctx.space, "gpipe::TransformerBlock::residual_attention_backward", dx.data(), a, dx.data(), N * d_);
  }

 private:
  TransformerBlock(const LayerShape& shape, const BlockConfig& c, const Parts& p)
      : Layer<T>(shape),
        T_(shape.input[0]), d_(shape.input[1]), m_(hidden_width(c, shape.input[1])), H_(c.heads),
        rate_(c.dropout), causal_(c.causal),
        ln1_(p.ln1), qkv_(p.qkv), proj_(p.proj), ln2_(p.ln2), mlp1_(p.mlp1), gelu_(p.gelu),
        mlp2_(p.mlp2), drop_attention_(p.drop_attention), drop_mlp_(p.drop_mlp) {}

  kernels::AttentionShape attention(std::int64_t n) const {
    return kernels::AttentionShape{n, T_, H_, d_ / H_, causal_};
  }

  std::vector<Layer<T>*> params() { return {&ln1_, &qkv_, &proj_, &ln2_, &mlp1_, &mlp2_}; }

  // (tokens of this micro-batch, cols) over `data`.
  Matrix<T> rows(T* data, std::int64_t cols) const { return detail::as_matrix(data, N_, cols); }
  ConstMatrix<T> rows(const T* data, std::int64_t cols) const {
    return detail::as_const_matrix(data, N_, cols);
  }

  // The branch output at `z` after Dropout (in training with rate > 0; in
  // buf_b_), else `z` itself. Masks key on whole samples (n, T*d).
  const T* dropped(const PassContext& ctx, Dropout<T>& drop, T* z, std::int64_t n) {
    if (!ctx.training || rate_ == 0.0) return z;
    drop.forward(ctx, detail::as_const_matrix<T>(z, n, T_ * d_), detail::as_matrix(buf_b_.data(), n, T_ * d_),
                  SavedView<T>());
    return buf_b_.data();
  }
  // The gradient at `dz` through Dropout, written to `out` (or `dz` when rate 0).
  const T* undropped(const PassContext& ctx, Dropout<T>& drop, const T* dz, T* out, std::int64_t n) {
    if (rate_ == 0.0) return dz;
    drop.backward(ctx, ConstMatrix<T>(), detail::as_const_matrix(dz, n, T_ * d_),
                   detail::as_matrix(out, n, T_ * d_), SavedView<T>());
    return out;
  }

  std::int64_t T_, d_, m_, H_;
  double rate_;
  bool causal_;
  std::int64_t capacity_ = 0, N_ = 0;  // N_: token rows of the current micro-batch
  LayerNorm<T> ln1_;
  Dense<T> qkv_, proj_;
  LayerNorm<T> ln2_;
  Dense<T> mlp1_;
  GELU<T> gelu_;
  Dense<T> mlp2_;
  Dropout<T> drop_attention_, drop_mlp_;
  Vector<T> buf_a_, buf_b_, buf_c_, buf_qkv_, buf_m_, buf_p_;
};

LayerEntry transformer_block_entry() {
  LayerEntry e;
  e.name = "transformer_block";
  e.keys = {"heads", "hidden", "dropout", "causal"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<BlockConfig>();
    c->heads = k.required_integer("heads", 1, "a positive integer");
    c->hidden = k.integer("hidden", 0, 1, "a positive integer");
    c->dropout = k.number("dropout", 0.0, 0.0, 1.0, true, "a number in [0, 1)");
    c->causal = k.flag("causal", false);
    return c;
  };
  e.output_shape = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const BlockConfig&>(base);
    if (in.rank() != 2) throw ShapeMismatch("(tokens, width); put patch_embed before it");
    if (in[1] % c.heads != 0)
      throw ShapeMismatch(fmt::format("(tokens, width) with width divisible by heads {}", c.heads));
    return in;
  };
  e.parameters = [](const LayerConfig& base, const Shape& in) {
    const Parts p = parts(static_cast<const BlockConfig&>(base), in, 0);
    std::vector<ParameterSpec> out;
    const std::pair<const char*, const LayerShape*> named[] = {{"ln1", &p.ln1}, {"qkv", &p.qkv},
                                                               {"proj", &p.proj}, {"ln2", &p.ln2},
                                                               {"mlp1", &p.mlp1}, {"mlp2", &p.mlp2}};
    for (const auto& [prefix, part] : named)
      for (ParameterSpec s : part->parameters) {
        s.name = std::string(prefix) + "_" + s.name;
        out.push_back(s);
      }
    return out;
  };
  e.saved = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const BlockConfig&>(base);
    return SavedSize{SavedLayout(1, in[0], in[1], hidden_width(c, in[1]), c.heads).end, 0};
  };
  // reserve(rows): work_a, work_b, work_c (n T, d), work_qkv (n T, 3d),
  // work_hidden (n T, hidden), work_probs (n, H, T, T).
  e.workspace = [](const LayerConfig& base, const Shape& in, std::int64_t rows, int scalar_bytes, int) {
    const auto& c = static_cast<const BlockConfig&>(base);
    const std::int64_t N = rows * in[0], d = in[1], s = scalar_bytes;
    return std::vector<std::int64_t>{N * d * s, N * d * s, N * d * s, 3 * N * d * s, N * hidden_width(c, d) * s,
                                     rows * c.heads * in[0] * in[0] * s};
  };
  // backward()'s Dense products over N = n T token rows (x, dy): mlp2 (g: hidden, dz: d), mlp1 (h2: d,
  // du: hidden), proj (o: d, da: d), qkv (h1: d, dqkv: 3d), each in its own OperandReuse scope.
  e.reused_operands = [](const LayerConfig& base, const Shape& in, std::int64_t rows) {
    const std::int64_t N = rows * in[0], d = in[1], m = hidden_width(static_cast<const BlockConfig&>(base), d);
    return ReusedOperands{N * std::max(d, m), N * std::max(3 * d, m)};
  };
  e.flops = [](const LayerConfig& base, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    const auto& c = static_cast<const BlockConfig&>(base);
    const Parts p = parts(c, in, 0);
    const std::int64_t N = batch * in[0];
    const double n = double(batch), T = double(in[0]), d = double(in[1]), H = double(c.heads);
    double f = p.ln1.flops(N, input_gradient) + p.qkv.flops(N, true) + p.proj.flops(N, true) +
               p.ln2.flops(N, true) + p.mlp1.flops(N, true) + p.gelu.flops(N, true) + p.mlp2.flops(N, true);
    if (c.dropout > 0) f += p.drop_attention.flops(batch, true) + p.drop_mlp.flops(batch, true);
    f += (4 * n * T * T * d + 5 * n * H * T * T) + (8 * n * T * T * d + 4 * n * H * T * T);
    f += (input_gradient ? 4.0 : 3.0) * n * T * d;
    return f;
  };
  return with_factories<TransformerBlock>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(transformer_block) { return {transformer_block_entry()}; }

}  // namespace gpipe

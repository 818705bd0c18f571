// The Transformer family: gradients against central finite differences in
// double (odd sizes, 3 channels, 2 heads of width 3, Dropout, a batch of 1),
// attention with uniform weights equals the mean of the values, a stable
// softmax for large logits, parameter/saved/FLOP counts, and each shape
// error's message.

#include <gtest/gtest.h>

#include "../common/deck_error.hpp"
#include "../common/layer_harness.hpp"

namespace gpipe {
namespace {

using test::LayerHarness;

void check(const std::string& yaml, const Shape& in, std::int64_t batch, const Shape& out) {
  LayerHarness h(yaml, in, batch);
  EXPECT_EQ(h.layer->output_shape(), out) << yaml;
  h.check(test::layer_inputs(batch * in.size()), 1e-6);
}

// 2 heads of width 3, 4 tokens, an MLP of odd width.
const std::string kBlock = "{type: transformer_block, heads: 2, hidden: 5}";

TEST(TransformerGradients, PatchEmbed) {
  check("{type: patch_embed, patch: 2, width: 5}", {3, 6, 4}, 3, {6, 5});
  check("{type: patch_embed, patch: 1, width: 2}", {3, 5, 7}, 1, {35, 2});
  check("{type: patch_embed, patch: 3, width: 4}", {1, 3, 9}, 2, {3, 4});
}

TEST(TransformerGradients, PosEmbedAndTokenMean) {
  check("{type: pos_embed}", {5, 3}, 2, {5, 3});
  check("{type: pos_embed}", {5, 3}, 1, {5, 3});
  check("{type: token_mean}", {5, 3}, 3, {3});
  check("{type: token_mean}", {7, 2}, 1, {2});
}

TEST(TransformerGradients, Block) {
  check(kBlock, {4, 6}, 3, {4, 6});
  check(kBlock, {4, 6}, 1, {4, 6});
  check("{type: transformer_block, heads: 1}", {3, 4}, 2, {3, 4});  // hidden = 4 width
  check("{type: transformer_block, heads: 3, hidden: 7}", {5, 3}, 2, {5, 3});  // heads of width 1
}

TEST(TransformerGradients, CausalBlock) {
  check("{type: transformer_block, heads: 2, hidden: 5, causal: true}", {4, 6}, 3, {4, 6});
  check("{type: transformer_block, heads: 1, causal: true}", {5, 3}, 1, {5, 3});
  check("{type: transformer_block, heads: 3, hidden: 4, causal: true}", {1, 3}, 2, {1, 3});  // T = 1
  check("{type: transformer_block, heads: 2, hidden: 5, dropout: 0.3, causal: true}", {4, 6}, 2, {4, 6});
}

TEST(TransformerValues, CausalTokensIgnoreLaterTokens) {
  // Changing token 2 of sample 0 changes no output of tokens 0 and 1 with
  // causal: true (bitwise), and does change token 0's without it.
  for (bool causal : {true, false}) {
    LayerHarness h(std::string("{type: transformer_block, heads: 2, hidden: 5, causal: ") + (causal ? "true}" : "false}"),
                   {4, 6}, 2);
    auto x = test::layer_inputs(2 * 24);
    const auto before = h.forward(x);
    for (int c = 0; c < 6; ++c) x[size_t(2 * 6 + c)] += 0.25 * (c + 1);  // not constant: LN1 removes a shift
    const auto after = h.forward(x);
    for (int e = 0; e < 12; ++e) {
      if (causal) EXPECT_EQ(before[size_t(e)], after[size_t(e)]) << e;
    }
    if (!causal) EXPECT_NE(before[0], after[0]);
    EXPECT_NE(before[12], after[12]);       // token 2 itself
    EXPECT_EQ(before[24], after[24]);       // sample 1 untouched
  }
}

TEST(TransformerGradients, BlockWithDropout) {
  // Masks are a pure function of (seed, step, layer, sample, column), so the
  // finite differences see the same mask as backward.
  check("{type: transformer_block, heads: 2, hidden: 5, dropout: 0.3}", {4, 6}, 3, {4, 6});
  LayerHarness h("{type: transformer_block, heads: 2, hidden: 5, dropout: 0.3}", {4, 6}, 2);
  const auto x = test::layer_inputs(2 * 24);
  const auto train = h.forward(x);
  h.ctx.training = false;
  const auto eval = h.forward(x);
  EXPECT_NE(train, eval);  // evaluation does not drop
}

TEST(TransformerGradients, FirstLayerParameterGradients) {
  // With dx skipped (the model's first layer), parameter gradients are unchanged.
  LayerHarness h(kBlock, {4, 6}, 2);
  const auto x = test::to_device(test::layer_inputs(48), 2, 24);
  const auto dy = test::to_device(h.r, 2, 24);
  Matrix<double> dx("dx", 2, 24);
  Kokkos::deep_copy(h.grads, 0.0);
  h.layer->backward(h.ctx, x, dy, dx);
  const auto with_dx = test::to_host(h.grads);
  Kokkos::deep_copy(h.grads, 0.0);
  h.layer->backward(h.ctx, x, dy, Matrix<double>());
  EXPECT_EQ(test::to_host(h.grads), with_dx);
}

// Parameters of kBlock-like blocks (width d, hidden m) that reduce the block
// to y = x + Attn(LN1(x)) with V = LN1(x) and identity projections: LN1
// (gamma 1, beta 0), Q = K = 0 (uniform attention) scaled by `qk`, the MLP
// branch zero.
std::vector<double> attention_only(std::int64_t d, std::int64_t m, double qk) {
  std::vector<double> p;
  const auto push = [&](std::int64_t count, double v) { p.insert(p.end(), size_t(count), v); };
  push(d, 1);  // ln1_gamma
  push(d, 0);  // ln1_beta
  for (std::int64_t r = 0; r < d; ++r)  // qkv_weight (d, 3d): [qk I | qk I | I]
    for (std::int64_t c = 0; c < 3 * d; ++c) p.push_back(c % d == r ? (c < 2 * d ? qk : 1.0) : 0.0);
  push(3 * d, 0);  // qkv_bias
  for (std::int64_t r = 0; r < d; ++r)  // proj_weight = I
    for (std::int64_t c = 0; c < d; ++c) p.push_back(r == c ? 1.0 : 0.0);
  push(d, 0);                  // proj_bias
  push(d, 1);                  // ln2_gamma
  push(d, 0);                  // ln2_beta
  push(d * m + m, 0.5);        // mlp1
  push(m * d + d, 0.0);        // mlp2: the MLP branch adds nothing
  return p;
}

TEST(TransformerValues, UniformAttentionIsTheMeanOfTheValues) {
  const std::int64_t T = 4, d = 6, n = 2;
  LayerHarness h(kBlock, {T, d}, n);
  ASSERT_EQ(h.layer->parameter_count(), std::int64_t(attention_only(d, 5, 0).size()));
  h.set_parameters(attention_only(d, 5, 0.0));
  const auto x = test::layer_inputs(n * T * d);
  const auto y = h.forward(x);
  for (std::int64_t i = 0; i < n; ++i) {
    // v = LN1(x) per token; every token's output adds the mean of v.
    std::vector<double> mean(size_t(d), 0.0);
    for (std::int64_t t = 0; t < T; ++t) {
      const double* row = &x[size_t((i * T + t) * d)];
      double mu = 0, var = 0;
      for (std::int64_t j = 0; j < d; ++j) mu += row[j] / double(d);
      for (std::int64_t j = 0; j < d; ++j) var += (row[j] - mu) * (row[j] - mu) / double(d);
      for (std::int64_t j = 0; j < d; ++j) mean[size_t(j)] += (row[j] - mu) / std::sqrt(var + 1e-5) / double(T);
    }
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t j = 0; j < d; ++j) {
        const size_t e = size_t((i * T + t) * d + j);
        EXPECT_NEAR(y[e] - x[e], mean[size_t(j)], 1e-14) << "sample " << i << " token " << t;
      }
  }
}

TEST(TransformerValues, SoftmaxIsStableForLargeLogits) {
  // Logits of order 1e6: exp without the row maximum would overflow to inf.
  LayerHarness h(kBlock, {4, 6}, 2);
  h.set_parameters(attention_only(6, 5, 1e3));
  const auto x = test::layer_inputs(48);
  const auto y = h.forward(x);
  for (size_t e = 0; e < y.size(); ++e) ASSERT_TRUE(std::isfinite(y[e])) << e;
  // Each token attends (almost) only to the token with the largest q.k: the
  // outputs stay within the range of LN1(x) around x.
  for (size_t e = 0; e < y.size(); ++e) EXPECT_LT(std::abs(y[e] - x[e]), 3.0);
}

TEST(TransformerValues, Counts) {
  const auto block = layer_shape(parse_layer(kBlock), {4, 6});
  // ln1 2d, qkv d*3d + 3d, proj d*d + d, ln2 2d, mlp1 d*m + m, mlp2 m*d + d.
  EXPECT_EQ(block.parameter_count(), 12 + 126 + 42 + 12 + 35 + 36);
  EXPECT_EQ(block.parameters[2].name, "qkv_weight");
  EXPECT_EQ(block.parameters[2].rows, 6);
  EXPECT_EQ(block.parameters[2].cols, 18);
  // T (4 + 7 d + 2 m) + H T^2.
  EXPECT_EQ(block.saved.elements(3), 3 * (4 * (4 + 42 + 10) + 2 * 16));
  EXPECT_EQ(block.flops(8), 8 * block.flops(1));
  EXPECT_GT(block.flops(8), block.flops(8, false));
  const auto patch = layer_shape(parse_layer("{type: patch_embed, patch: 7, width: 16}"), {1, 28, 28});
  EXPECT_EQ(patch.output, (Shape{16, 16}));
  EXPECT_EQ(patch.parameter_count(), 49 * 16 + 16);
  // Dense over n*T rows: 4 n T (p^2 C) d (no input gradient) + 2 n T d.
  EXPECT_EQ(patch.flops(2, false), 4.0 * 2 * 16 * 49 * 16 + 2.0 * 2 * 16 * 16);
  const auto mean = layer_shape(parse_layer("{type: token_mean}"), {16, 8});
  EXPECT_EQ(mean.output, (Shape{8}));
  EXPECT_EQ(mean.flops(3), 2.0 * 3 * 128);
}

std::string deck_error(const std::string& input, const std::string& layers) {
  return test::deck_error(input, layers, "vit.yaml");
}

TEST(TransformerShapeErrors, ExactMessages) {
  EXPECT_EQ(deck_error("784", "[{type: patch_embed, patch: 7, width: 8}, {type: token_mean}, {type: dense, units: 2}]"),
            "vit.yaml:3:12 (model.layers[0]): layer 0 (patch_embed) cannot take input shape [784]: "
            "expected (channels, height, width)");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: patch_embed, patch: 5, width: 8}]"),
            "vit.yaml:3:12 (model.layers[0]): layer 0 (patch_embed) cannot take input shape [1, 28, 28]: "
            "expected height and width divisible by patch 5");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: patch_embed, patch: 7, width: 8}, "
                                      "{type: transformer_block, heads: 3}]"),
            "vit.yaml:3:53 (model.layers[1]): layer 1 (transformer_block) cannot take input shape [16, 8]: "
            "expected (tokens, width) with width divisible by heads 3");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: pos_embed}]"),
            "vit.yaml:3:12 (model.layers[0]): layer 0 (pos_embed) cannot take input shape [1, 28, 28]: "
            "expected (tokens, width); put patch_embed before it");
  EXPECT_EQ(deck_error("784", "[{type: transformer_block, heads: 1}]"),
            "vit.yaml:3:12 (model.layers[0]): layer 0 (transformer_block) cannot take input shape [784]: "
            "expected (tokens, width); put patch_embed before it");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: patch_embed, patch: 7, width: 8}, {type: dense, units: 2}]"),
            "vit.yaml:3:53 (model.layers[1]): layer 1 (dense) cannot take input shape [16, 8]: "
            "expected (features); add {type: flatten} before it");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: flatten}, {type: token_mean}]"),
            "vit.yaml:3:29 (model.layers[1]): layer 1 (token_mean) cannot take input shape [784]: "
            "expected (tokens, width); put patch_embed before it");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: patch_embed, patch: 7, width: 8}, {type: transformer_block, heads: 2, dropout: 1}]"),
            "vit.yaml:3:98: model.layers[1].dropout: expected a number in [0, 1), got 1");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: patch_embed, patch: 7, width: 8}, {type: transformer_block, heads: 2, causal: 3}]"),
            "vit.yaml:3:97: model.layers[1].causal: expected true or false, got '3'");
  EXPECT_EQ(deck_error("[1, 28, 28]", "[{type: patch_embed, patch: 7}]"),
            "vit.yaml:3:12: missing required field 'model.layers[0].width' (a positive integer)");
}

}  // namespace
}  // namespace gpipe

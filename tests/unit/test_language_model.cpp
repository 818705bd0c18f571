// The language model's pieces: token_embedding and lm_head gradients against
// central finite differences in double, the embedding as a gather, the
// token cross-entropy's known values (uniform logits give log V) and its
// gradient against finite differences and against the per-row loss, the
// token data reader (sequences, shifted labels, every error), and the deck's
// data.format: tokens checks with their messages.

#include <gtest/gtest.h>
#include <hdf5.h>

#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "../common/deck_error.hpp"
#include "../common/layer_harness.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/loss/token_cross_entropy.hpp"

namespace gpipe {
namespace {

using test::LayerHarness;

// Token ids as the first cell stages them: exact integers in float columns.
std::vector<double> ids(std::int64_t count, std::int64_t vocabulary, std::uint64_t seed) {
  std::vector<double> x(static_cast<size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    x[size_t(i)] = double(rng::hash(seed, 5, std::uint64_t(i)) % std::uint64_t(vocabulary));
  return x;
}

TEST(TokenEmbedding, ShapesAndGather) {
  LayerHarness h("{type: token_embedding, vocabulary: 5, width: 3}", {4}, 2);
  EXPECT_EQ(h.layer->output_shape(), (Shape{4, 3}));
  EXPECT_EQ(h.layer->parameter_count(), 15);
  std::vector<double> w(15);
  for (int i = 0; i < 15; ++i) w[size_t(i)] = 10.0 * (i / 3) + (i % 3);  // E(v, j) = 10 v + j
  h.set_parameters(w);
  const auto y = h.forward({4, 0, 2, 2, 1, 3, 0, 4});
  const std::vector<double> expected = {40, 41, 42, 0, 1, 2, 20, 21, 22, 20, 21, 22,
                                        10, 11, 12, 30, 31, 32, 0, 1, 2, 40, 41, 42};
  EXPECT_EQ(y, expected);
}

TEST(TokenEmbedding, WeightGradientMatchesFiniteDifferences) {
  // ids have no gradient, so only the parameters are perturbed; repeated ids
  // (8 tokens, vocabulary 3) make the sums over tokens visible.
  for (const auto& [V, d, T, n] : {std::tuple<int, int, int, int>{3, 4, 4, 2}, {7, 2, 5, 3}}) {
    LayerHarness h(fmt::format("{{type: token_embedding, vocabulary: {}, width: {}}}", V, d), {T}, n);
    const auto x0 = ids(n * T, V, std::uint64_t(V));
    Matrix<double> dx("dx", n, T);
    Kokkos::deep_copy(dx, 7.0);
    Kokkos::deep_copy(h.grads, 0.0);
    const auto x = test::to_device(x0, n, T);
    h.layer->backward(h.ctx, x, test::to_device(h.r, n, T * d), dx);
    for (double v : test::to_host(dx)) EXPECT_EQ(v, 0.0);
    const auto g = test::to_host(h.grads);
    auto p = test::to_host(h.params);
    for (size_t i = 0; i < p.size(); ++i) {
      const double keep = p[i];
      p[i] = keep + 1e-6;
      h.set_parameters(p);
      const double fp = h.objective(x0);
      p[i] = keep - 1e-6;
      h.set_parameters(p);
      const double fm = h.objective(x0);
      p[i] = keep;
      h.set_parameters(p);
      EXPECT_NEAR(g[i], (fp - fm) / 2e-6, 1e-7) << "V " << V << " param " << i;
    }
  }
}

TEST(TokenEmbedding, RejectsIdsOutsideTheVocabulary) {
  LayerHarness h("{type: token_embedding, vocabulary: 4, width: 2}", {3}, 1);
  for (const std::vector<double>& x : {std::vector<double>{0, 4, 1}, {0, -1, 1}, {0, 1.5, 1}}) {
    try {
      h.forward(x);
      ADD_FAILURE() << "no error";
    } catch (const PipelineError& e) {
      EXPECT_STREQ(e.what(), "token_embedding (layer 0): 1 input id(s) are not integers in [0, 4) (the "
                             "layer's vocabulary)");
    }
  }
}

TEST(LmHead, GradientsMatchFiniteDifferences) {
  for (const auto& [T, d, V, n] : {std::tuple<int, int, int, int>{3, 4, 5, 2}, {1, 3, 2, 1}, {4, 2, 7, 3}}) {
    LayerHarness h(fmt::format("{{type: lm_head, vocabulary: {}}}", V), {T, d}, n);
    EXPECT_EQ(h.layer->output_shape(), (Shape{T, V}));
    EXPECT_EQ(h.layer->parameter_count(), V * d);
    h.check(test::layer_inputs(n * T * d), 1e-6);
  }
}

TEST(LmHead, ComputesXWTransposedPerToken) {
  LayerHarness h("{type: lm_head, vocabulary: 3}", {2, 2}, 1);
  h.set_parameters({1, 0, 0, 1, 1, 1});  // W rows: (1, 0), (0, 1), (1, 1)
  EXPECT_EQ(h.forward({2, 3, -1, 5}), (std::vector<double>{2, 3, 5, -1, 5, 4}));
}

TEST(LanguageModelShapes, ErrorsNameTheLayer) {
  EXPECT_EQ(test::deck_error("[4, 2]", "[{type: token_embedding, vocabulary: 5, width: 3}, {type: flatten}, "
                                       "{type: dense, units: 2}]", "d.yaml"),
            "d.yaml:3:12 (model.layers[0]): layer 0 (token_embedding) cannot take input shape [4, 2]: "
            "expected (tokens): one token id per column (data.format: tokens)");
  EXPECT_EQ(test::deck_error("8", "[{type: lm_head, vocabulary: 5}]", "d.yaml"),
            "d.yaml:3:12 (model.layers[0]): layer 0 (lm_head) cannot take input shape [8]: expected "
            "(tokens, width); put token_embedding before it");
}

// Token cross-entropy on (n, T*V) outputs.
struct TokenLoss {
  std::int64_t n, T, V;
  std::vector<double> z;
  std::vector<std::int32_t> y;

  LossSums run(const std::vector<double>& logits, double scale, std::vector<double>* grad) const {
    TokenCrossEntropy<double> loss;
    Matrix<double> dz("dz", grad ? n : 0, T * V);
    const auto sums = loss.evaluate(test::to_device(logits, n, T * V),
                                    Targets<double>(ConstLabelVector(test::labels(y)), T), scale, dz);
    if (grad) *grad = test::to_host(dz);
    return sums;
  }
};

TEST(TokenCrossEntropyLoss, UniformLogitsGiveLogV) {
  const TokenLoss l{2, 3, 5, std::vector<double>(30, 0.25), {0, 1, 2, 3, 4, 0}};
  std::vector<double> g;
  const auto sums = l.run(l.z, 0.5, &g);
  EXPECT_NEAR(sums.loss, 2 * std::log(5.0), 1e-14);  // 2 samples, each the mean over 3 tokens
  // scale / T (softmax - onehot): 0.5 / 3 (0.2 - [v = y])
  EXPECT_NEAR(g[0], 0.5 / 3 * (0.2 - 1), 1e-15);
  EXPECT_NEAR(g[1], 0.5 / 3 * 0.2, 1e-15);
  EXPECT_NEAR(g[5 + 1], 0.5 / 3 * (0.2 - 1), 1e-15);
  const auto m = token_metrics(std::log(5.0));
  EXPECT_NEAR(m.perplexity, 5.0, 1e-13);
  EXPECT_NEAR(m.bits, std::log2(5.0), 1e-14);
}

TEST(TokenCrossEntropyLoss, GradientMatchesFiniteDifferencesAndCountsTokens) {
  TokenLoss l{3, 4, 6, test::uniform(3 * 4 * 6, 8, -3, 3), {}};
  for (int i = 0; i < 12; ++i) l.y.push_back(std::int32_t((i * 5) % 6));
  const double scale = 1.0 / 3;
  std::vector<double> g;
  const auto sums = l.run(l.z, scale, &g);
  // The loss the gradient belongs to is scale * sum of per-sample losses.
  for (size_t i = 0; i < l.z.size(); ++i) {
    auto zp = l.z, zm = l.z;
    zp[i] += 1e-6;
    zm[i] -= 1e-6;
    const double fd = scale * (l.run(zp, scale, nullptr).loss - l.run(zm, scale, nullptr).loss) / 2e-6;
    EXPECT_NEAR(g[i], fd, 1e-8) << i;
  }
  // Per token: the arg-max hits and the mean of the rows' cross-entropies.
  double expected = 0;
  std::int64_t hits = 0;
  for (int r = 0; r < 12; ++r) {
    double top = -1e300, sum = 0;
    int arg = 0;
    for (int v = 0; v < 6; ++v)
      if (l.z[size_t(r * 6 + v)] > top) top = l.z[size_t(r * 6 + (arg = v))];
    for (int v = 0; v < 6; ++v) sum += std::exp(l.z[size_t(r * 6 + v)] - top);
    expected += (std::log(sum) - (l.z[size_t(r * 6 + l.y[size_t(r)])] - top)) / 4;
    hits += arg == l.y[size_t(r)] ? 1 : 0;
  }
  EXPECT_NEAR(sums.loss, expected, 1e-12);
  EXPECT_EQ(sums.correct, hits);
}

TEST(TokenCrossEntropyLoss, Errors) {
  const TokenLoss bad{1, 2, 3, std::vector<double>(6, 0.0), {0, 3}};
  try {
    bad.run(bad.z, 1.0, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "softmax cross-entropy: 1 label(s) outside [0, 3)");
  }
  const TokenLoss few{2, 2, 3, std::vector<double>(12, 0.0), {0, 1, 2}};
  try {
    few.run(few.z, 1.0, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "token cross-entropy: 3 labels for 2 samples of 2 tokens (the loss needs one "
                           "integer label per token)");
  }
  EXPECT_THROW(make_loss<double>(LossSpec{"token_entropy"}), InputError);
  EXPECT_NE(dynamic_cast<TokenCrossEntropy<double>*>(make_loss<double>(LossSpec{"token_cross_entropy"}).get()),
            nullptr);
}

// A token file: `tokens` (count ids 0, 1, ..., cycling below `vocab`) and a vocabulary.
std::string token_file(const std::string& name, std::int64_t count, int vocab, bool with_vocabulary = true,
                       std::int64_t bad_at = -1) {
  const std::string path = ::testing::TempDir() + "gpipe_tokens_" + name;
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<std::uint8_t> t(static_cast<size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) t[size_t(i)] = std::uint8_t(i % vocab);
  if (bad_at >= 0) t[size_t(bad_at)] = std::uint8_t(vocab);
  auto put = [&](const char* n, const std::vector<std::uint8_t>& v) {
    const hsize_t dims[1] = {v.size()};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t d = H5Dcreate2(f, n, H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Sclose(space);
  };
  put("tokens", t);
  if (with_vocabulary) {
    std::vector<std::uint8_t> chars;
    for (int v = 0; v < vocab; ++v) chars.push_back(std::uint8_t('a' + v));
    put("vocabulary", chars);
  }
  H5Fclose(f);
  return path;
}

TEST(TokenData, SequencesAndShiftedLabels) {
  const auto path = token_file("ok.h5", 14, 5);  // 0 1 2 3 4 0 1 2 3 4 0 1 2 3
  const Dataset d = load_hdf5_tokens(path, "tokens", 4, 0);
  EXPECT_EQ(d.samples, 3);  // (14 - 1) / 4: every id an input once, the tail dropped
  EXPECT_EQ(d.features, 4);
  EXPECT_EQ(d.labels_per_sample, 4);
  EXPECT_EQ(d.vocabulary, "abcde");
  EXPECT_EQ(d.inputs, (std::vector<float>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}));
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2}));
  const Dataset limited = load_hdf5_tokens(path, "tokens", 4, 2, false);
  EXPECT_EQ(limited.samples, 2);
  EXPECT_TRUE(limited.inputs.empty());
  EXPECT_EQ(limited.labels.size(), 8u);
  // Exactly T + 1 ids make one sequence.
  EXPECT_EQ(load_hdf5_tokens(token_file("one.h5", 5, 3, false), "tokens", 4, 0).samples, 1);
}

std::string token_error(const std::string& path, const std::string& dataset = "tokens", std::int64_t T = 4) {
  try {
    load_hdf5_tokens(path, dataset, T, 0);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TokenData, ErrorsNameTheFileAndTheProblem) {
  const auto path = token_file("short.h5", 4, 5);
  EXPECT_EQ(token_error(path), path + ": dataset 'tokens' holds 4 token ids, fewer than one sequence of "
                                      "data.sequence_length + 1 = 5");
  const auto bad = token_file("bad.h5", 20, 5, true, 7);
  EXPECT_EQ(token_error(bad), bad + ": dataset 'tokens': token 7 has id 5, outside [0, 5) (the file's "
                                    "vocabulary)");
  EXPECT_EQ(token_error(bad, "ids"), bad + ": no dataset 'ids' (set data.tokens_dataset in the deck)");
  EXPECT_EQ(token_error(::testing::TempDir() + "gpipe_tokens_missing.h5"),
            ::testing::TempDir() + "gpipe_tokens_missing.h5: HDF5 data file not found");
}

std::string lm_deck(const std::string& data, const std::string& loss = "token_cross_entropy",
                    std::int64_t input = 4) {
  return "model:\n  input: " + std::to_string(input) +
         "\n  layers: [{type: token_embedding, vocabulary: 5, width: 2}, {type: lm_head, vocabulary: 5}]"
         "\n  loss: " + loss + "\ndata: " + data + "\ntraining: {epochs: 1, batch_size: 4}\n";
}

TEST(TokenData, DeckKeysAndTheirErrors) {
  const Deck deck = parse_deck(lm_deck("{format: tokens, train_file: a.h5, test_file: b.h5}"), "deck.yaml");
  EXPECT_EQ(deck.data.sequence_length, 4);
  EXPECT_EQ(deck.data.tokens_dataset, "tokens");
  EXPECT_EQ(deck.data.normalize, "none");
  EXPECT_EQ(deck.model.labels_per_sample(), 4);
  EXPECT_EQ(deck.model.vocabulary(), 5);
  EXPECT_EQ(test::deck_text_error(lm_deck("{format: tokens, train_file: a, test_file: b, sequence_length: 8}")),
            "deck.yaml:5:70: data.sequence_length: 8 tokens per sample, but model.input is 4 (one token id "
            "per input column)");
  EXPECT_EQ(test::deck_text_error(lm_deck("{format: tokens, train_file: a, test_file: b}", "softmax_cross_entropy")),
            "model.layers: the last layer must output a flat vector of class logits, got "
            "shape [4, 5] (add {type: flatten})");
  EXPECT_EQ(test::deck_text_error(lm_deck("{format: hdf5, train_file: a, test_file: b}")),
            "deck.yaml:5:16: model.loss: token_cross_entropy reads a label per token, which only "
            "data.format: tokens provides");
  EXPECT_EQ(test::deck_text_error(lm_deck("{format: tokens, train_file: a, test_file: b, normalize: standardize}")),
            "deck.yaml:5:64: data.normalize: token ids are never normalized (expected none or no key for "
            "data.format: tokens)");
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// The final LayerNorm of a GPT (GPT-2's ln_f): layer_norm over a
// (tokens, width) input normalizes each token's width features on their
// own: parameters (1, width) twice, saved state 2 per token, the gradient
// against central differences, and the forward bitwise that of a
// (width) layer_norm over the n*T token rows with the same gamma and beta.
TEST(LayerNormTokens, PerTokenEqualsRowWiseAndHasCentralDifferenceGradients) {
  test::LayerHarness seq("{type: layer_norm}", {3, 4}, 2);
  EXPECT_EQ(seq.layer->parameter_count(), 8);
  EXPECT_EQ(seq.layer->saved_size().elements(1), 6);
  const auto x = test::layer_inputs(2 * 12);
  seq.check(x, 1e-6);
  test::LayerHarness rows("{type: layer_norm}", {4}, 6);  // the same 8 random parameters
  EXPECT_EQ(seq.forward(x), rows.forward(x));
  EXPECT_THROW(test::LayerHarness("{type: layer_norm}", {2, 3, 4}), InputError);
}

}  // namespace
}  // namespace gpipe

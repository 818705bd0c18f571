// A small GPT over the pipeline (ctest runs this at 1, 2, 3 and 4 ranks):
// weights bitwise equal to the one-cell run for every K and partition, with
// gradient clipping by global norm active and a linear warm-up, under
// fill_drain and 1f1b; the global norm itself bitwise equal across K and
// equal to the norm of the applied update (SGD, lr 1); predict's logits
// equal across K; and the per-token loss of a fresh model near log V.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

constexpr std::int64_t kV = 7, kT = 5, kBatch = 6, kLayers = 5;
const std::string kGpt =
    "[{type: token_embedding, vocabulary: 7, width: 6}, {type: pos_embed}, "
    "{type: transformer_block, heads: 2, hidden: 8}, {type: transformer_block, heads: 2, hidden: 5}, "
    "{type: lm_head, vocabulary: 7}]";

std::string gpt_deck(const std::string& pipeline, const std::string& optimizer, const std::string& model = kGpt) {
  return "seed: 3\nprecision: double\nmodel:\n  input: 5\n  loss: token_cross_entropy\n  layers: " + model +
         "\ndata: {format: tokens, train_file: a.h5, test_file: b.h5}"
         "\ntraining: {epochs: 1, batch_size: " + std::to_string(kBatch) +
         ", micro_batches: 3}\noptimizer: " + optimizer + "\npipeline: " + pipeline + "\n";
}

// A token stream with structure (id = a walk with steps 1 and 3 mod V), cut
// into sequences of T with next-token labels, as load_hdf5_tokens does.
const Dataset& data() {
  static const Dataset d = [] {
    Dataset s;
    s.name = s.labels_name = "tokens";
    s.samples = 3 * kBatch;
    s.features = kT;
    s.labels_per_sample = kT;
    std::vector<std::int32_t> stream{0};
    for (std::int64_t i = 0; i < s.samples * kT; ++i)
      stream.push_back(std::int32_t((stream.back() + (rng::hash(9, 1, std::uint64_t(i)) % 2 ? 1 : 3)) % kV));
    for (std::int64_t k = 0; k < s.samples * kT; ++k) {
      s.inputs.push_back(float(stream[size_t(k)]));
      s.labels.push_back(stream[size_t(k) + 1]);
    }
    return s;
  }();
  return d;
}

const std::string kClipped = "{type: adam, lr: 0.01, clip_norm: 0.05, warmup_steps: 2}";

struct TrainResult {
  std::vector<double> params;
  std::vector<double> norms;
  std::vector<double> losses;
};

TrainResult train(const std::string& pipeline, MPI_Comm comm, const std::string& optimizer = kClipped, int steps = 3,
                  const std::string& model = kGpt) {
  Pipeline<double> p(parse_deck(gpt_deck(pipeline, optimizer, model), "gpt-deck"), comm);
  TrainResult r;
  for (int s = 0; s < steps; ++s) {
    const auto order = epoch_order(data().samples, 3, 0, true);
    const auto sums = p.step(data(), order, (s % 3) * kBatch, kBatch);
    r.norms.push_back(p.last_gradient_norm());
    r.losses.push_back(p.from_last(sums.loss) / double(kBatch));
  }
  r.params = p.gather_parameters();
  return r;
}

TEST(LanguageModelPipeline, ClippedWarmUpStepsBitwiseAcrossPartitions) {
  // fill_drain and 1f1b accumulate the micro-batches' gradients in different
  // orders (docs/design.md): each is compared with its own one-cell run.
  const int K = world_size();
  std::string front = "[" + std::to_string(kLayers - (K - 1)), back = "[";
  for (int k = 1; k < K; ++k) front += ", 1";
  for (int k = 1; k < K; ++k) back += "1, ";
  for (const std::string schedule : {"fill_drain", "1f1b"}) {
    const std::string s = "schedule: " + schedule;
    TrainResult reference;
    if (world_rank() == 0) {
      reference = train("{" + s + "}", MPI_COMM_SELF);
      // The clip is active (the norm exceeds 0.05) and the first loss is near log V.
      for (double n : reference.norms) EXPECT_GT(n, 0.05);
      EXPECT_NEAR(reference.losses[0], std::log(double(kV)), 0.2);
    }
    for (const std::string p : {"{balance: flops, " + s + "}", "{balance: " + front + "], " + s + "}",
                                "{balance: " + back + std::to_string(kLayers - (K - 1)) + "], " + s + "}",
                                "{remat: always, " + s + "}"}) {
      const auto r = train(p, MPI_COMM_WORLD);
      if (world_rank() == 0) {
        EXPECT_EQ(r.params, reference.params) << "K = " << K << ", pipeline " << p;
        EXPECT_EQ(r.norms, reference.norms) << "K = " << K << ", pipeline " << p;
        EXPECT_EQ(r.losses, reference.losses) << "K = " << K << ", pipeline " << p;
      }
    }
  }
}

TEST(LanguageModelPipeline, ClippedUpdateHasTheClipNormAndTheGradientsDirection) {
  // SGD without momentum at lr 1: the update is -g (unclipped) or -g c/||g||.
  const std::string plain = "{type: sgd, momentum: 0, lr: 1}";
  const double clip = 0.01;
  const std::string clipped = "{type: sgd, momentum: 0, lr: 1, clip_norm: 0.01}";
  Pipeline<double> p0(parse_deck(gpt_deck("{}", plain), "gpt-deck"), MPI_COMM_WORLD);
  const auto start = p0.gather_parameters();
  const auto a = train("{}", MPI_COMM_WORLD, plain, 1);
  const auto b = train("{}", MPI_COMM_WORLD, clipped, 1);
  if (world_rank() != 0) return;
  double g2 = 0, u2 = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    const double g = start[i] - a.params[i], u = start[i] - b.params[i];
    g2 += g * g;
    u2 += u * u;
    EXPECT_NEAR(u, g * clip / b.norms[0], 1e-12) << i;
  }
  EXPECT_NEAR(std::sqrt(g2), b.norms[0], 1e-9 * b.norms[0]);  // the norm clip_norm saw
  EXPECT_NEAR(std::sqrt(u2), clip, 1e-9);
  EXPECT_EQ(a.norms[0], 0.0);  // no clip: no norm computed
}

TEST(LanguageModelPipeline, WarmUpRatesAndPredictAcrossK) {
  OptimizerSpec o;
  o.lr = 0.4;
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 10), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 3, 10), 0.4);
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 10), 0.4);
  o.schedule = "cosine";
  EXPECT_DOUBLE_EQ(learning_rate(o, 4, 10), 0.4);  // the cosine starts after the warm-up
  EXPECT_NEAR(learning_rate(o, 7, 10), 0.2, 1e-15);
  // Logits of the trained model through predict: the same on K cells as on one.
  auto logits = [](MPI_Comm comm) {
    Pipeline<double> p(parse_deck(gpt_deck("{}", kClipped), "gpt-deck"), comm);
    const auto order = epoch_order(data().samples, 3, 0, false);
    p.step(data(), order, 0, kBatch);
    return p.predict(data().inputs.data(), 4);
  };
  std::vector<double> one;
  if (world_rank() == 0) one = logits(MPI_COMM_SELF);
  const auto many = logits(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    EXPECT_EQ(many.size(), size_t(4 * kT * kV));
    EXPECT_EQ(many, one);
  }
}

const std::string kTied =
    "[{type: token_embedding, vocabulary: 7, width: 6}, {type: pos_embed}, "
    "{type: transformer_block, heads: 2, hidden: 8}, {type: transformer_block, heads: 2, hidden: 5}, "
    "{type: lm_head, vocabulary: 7, tie: token_embedding}]";

TEST(LanguageModelPipeline, TiedEmbeddingsStayOneMatrixBitwiseAcrossK) {
  // E is the first 42 parameters, the head's W the last 42 (layer order).
  const std::int64_t n = kV * 6;
  auto check_tied = [&](const std::vector<double>& p, const std::string& what) {
    const std::vector<double> e(p.begin(), p.begin() + n), w(p.end() - n, p.end());
    EXPECT_EQ(e, w) << what;
  };
  const int K = world_size();
  for (const std::string schedule : {"fill_drain", "1f1b"}) {
    TrainResult one;
    if (world_rank() == 0) {
      one = train("{schedule: " + schedule + "}", MPI_COMM_SELF, kClipped, 3, kTied);
      check_tied(one.params, "K = 1, " + schedule);
    }
    // The embedding alone on cell 0, the head on the last cell: [1, L - K, 1, ...].
    std::string split = "[1, " + std::to_string(kLayers - K + 1);
    for (int k = 2; k < K; ++k) split += ", 1";
    split += "]";
    for (const std::string p : {"{schedule: " + schedule + "}", "{balance: " + split + ", schedule: " + schedule + "}"}) {
      if (K == 1 && p.find("balance") != std::string::npos) continue;
      const auto r = train(p, MPI_COMM_WORLD, kClipped, 3, kTied);
      if (world_rank() == 0) {
        check_tied(r.params, "K = " + std::to_string(K) + ", " + p);
        EXPECT_EQ(r.params, one.params) << "K = " << K << ", " << p;
        EXPECT_EQ(r.norms, one.norms) << "K = " << K << ", " << p;
      }
    }
  }
  // The head starts from E, and one SGD step keeps W = E.
  const auto plain = "{type: sgd, momentum: 0, lr: 1}";
  Pipeline<double> start(parse_deck(gpt_deck("{}", plain, kTied), "gpt-deck"), MPI_COMM_WORLD);
  const auto p0 = start.gather_parameters();
  const auto tied = train("{}", MPI_COMM_WORLD, plain, 1, kTied);
  if (world_rank() == 0) {
    check_tied(p0, "initial");  // the head starts from E
    check_tied(tied.params, "after one SGD step");
    EXPECT_NE(tied.params, p0);
  }
}

// Tied embeddings with replicas: D = 2 replicas of K = 2 cells (4 ranks),
// the embedding alone on cell 0 and the head on cell 1, so each replica's
// tie exchange runs between its own two cells after the replicas'
// gradient reduction: the weights stay one matrix (E = W), equal on both
// replicas, and bitwise those of D = 2 replicas of one cell (ranks 0 and 1,
// where the tie is a local sum), with clipping and the warm-up on.
TEST(LanguageModelPipeline, TiedEmbeddingsWithTwoReplicasMatchOneCellBitwise) {
  if (world_size() != 4) GTEST_SKIP() << "4 ranks: 2 replicas x 2 cells";
  const std::int64_t n = kV * 6;
  const std::string replicas = "parallel: {cells: 1, deterministic_reduction: true}\n";
  MPI_Comm two = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < 2 ? 0 : MPI_UNDEFINED, world_rank(), &two);
  const auto run = [&](const std::string& pipeline, const std::string& parallel, MPI_Comm comm) {
    Pipeline<double> p(parse_deck(gpt_deck(pipeline, kClipped, kTied) + parallel, "gpt-deck"), comm);
    TrainResult r;
    for (int s = 0; s < 3; ++s) {
      const auto order = epoch_order(data().samples, 3, 0, true);
      p.step(data(), order, (s % 3) * kBatch, kBatch);
      r.norms.push_back(p.last_gradient_norm());
    }
    r.params = p.gather_parameters();
    return r;
  };
  TrainResult one;
  if (two != MPI_COMM_NULL) one = run("{}", replicas, two);
  std::string two_cells = replicas;
  two_cells.replace(two_cells.find("cells: 1"), 8, "cells: 2");
  const TrainResult split = run("{balance: [1, 4]}", two_cells, MPI_COMM_WORLD);
  // Ranks 0 and 1 are the first cells of replicas 0 and 1 in both grids
  // (placement replica: pipelines [0, 2] [1, 3]): each holds its replica's weights.
  if (world_rank() < 2) {
    ASSERT_EQ(split.params.size(), one.params.size());
    ASSERT_GT(split.params.size(), size_t(2 * n));
    const std::vector<double> e(split.params.begin(), split.params.begin() + n), w(split.params.end() - n, split.params.end());
    EXPECT_EQ(e, w);
    EXPECT_EQ(split.params, one.params);
    EXPECT_EQ(split.norms, one.norms);
  }
  if (two != MPI_COMM_NULL) MPI_Comm_free(&two);
}

TEST(LanguageModelPipeline, TieErrors) {
  auto error = [](const std::string& model) {
    try {
      Pipeline<double> p(parse_deck(gpt_deck("{}", kClipped, model), "gpt-deck"), MPI_COMM_WORLD);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("[{type: token_embedding, vocabulary: 7, width: 4}, {type: transformer_block, heads: 2}, "
                  "{type: transformer_block, heads: 2}, {type: lm_head, vocabulary: 9, tie: token_embedding}]"),
            "gpt-deck:6:136 (model.layers[3]): lm_head: tie: its weight (9, 4) and token_embedding's (layer 0: "
            "(7, 4)) must have the same shape (vocabulary, width)");
  EXPECT_EQ(error("[{type: token_embedding, vocabulary: 7, width: 4}, {type: lm_head, vocabulary: 7, tie: dense}]"),
            "gpt-deck:6:98: model.layers[1].tie: expected token_embedding (the layer whose weight the head "
            "shares), got 'dense'");
}

}  // namespace
}  // namespace gpipe

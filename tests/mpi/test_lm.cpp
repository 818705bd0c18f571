// A small GPT over the pipeline (ctest runs this at 1, 2, 3 and 4 ranks):
// weights bitwise equal to the one-cell run for every K and partition, with
// gradient clipping by global norm active and a linear warm-up, under
// fill_drain and 1f1b; the global norm itself bitwise equal across K and
// equal to the norm of the applied update (SGD, lr 1); predict's logits
// equal across K; and the per-token loss of a fresh model near log V.

#include <gtest/gtest.h>
#include <mpi.h>

#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <unistd.h>

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

std::vector<double> slice_of(const std::vector<double>& v, const std::vector<std::int64_t>& at, int l) {
  return std::vector<double>(v.begin() + at[size_t(l)], v.begin() + at[size_t(l) + 1]);
}

const std::string kTied =
    "[{type: token_embedding, vocabulary: 7, width: 6}, {type: pos_embed}, "
    "{type: transformer_block, heads: 2, hidden: 8}, {type: transformer_block, heads: 2, hidden: 5}, "
    "{type: lm_head, vocabulary: 7, tie: token_embedding}]";

// The tied pair as the cells hold it, on world rank 0 of the pipeline
// `p` runs on: E (the embedding's values) and the head's W. With both on
// one rank (Runner::shares_tied_weight) W is E's memory: returned as E.
struct TiedPair {
  std::vector<double> e, w;
  bool one_matrix = false;  // the pair shares one matrix on its rank
};

std::vector<double> host_values(const Pipeline<double>& p) {
  auto h = Kokkos::create_mirror_view(p.cell().parameters());
  Kokkos::deep_copy(h, p.cell().parameters());
  return std::vector<double>(h.data(), h.data() + h.extent(0));
}

TiedPair tied_pair(const Pipeline<double>& p, int embedding, int head) {
  const auto& cell = p.cell();
  const MPI_Comm comm = cell.comm();
  const auto slice = [&](int layer) {
    const int l = cell.local_layer(layer);
    const auto at = cell.value_offsets();
    const auto v = host_values(p);
    if (cell.shares_tied_weight() && l == cell.shared_tied_head()) return slice_of(v, at, cell.local_layer(embedding));
    return slice_of(v, at, l);
  };
  TiedPair out;
  int shared = cell.shares_tied_weight() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_MAX, comm);
  out.one_matrix = shared == 1;
  const std::int64_t n = kV * 6;
  for (const auto& [layer, into] : {std::pair<int, std::vector<double>*>{embedding, &out.e}, {head, &out.w}}) {
    const int owner = cell.rank_of_layer(layer);
    if (cell.rank() == owner) *into = slice(layer);
    if (owner == 0) continue;
    if (cell.rank() == owner) MPI_Send(into->data(), int(n), MPI_DOUBLE, 0, 5, comm);
    if (cell.rank() == 0) {
      into->resize(size_t(n));
      MPI_Recv(into->data(), int(n), MPI_DOUBLE, owner, 5, comm, MPI_STATUS_IGNORE);
    }
  }
  return out;
}

TEST(LanguageModelPipeline, TiedEmbeddingsStayOneMatrixBitwiseAcrossK) {
  const std::int64_t n = kV * 6;
  const int K = world_size();
  for (const std::string schedule : {"fill_drain", "1f1b"}) {
    TrainResult one;
    if (world_rank() == 0) one = train("{schedule: " + schedule + "}", MPI_COMM_SELF, kClipped, 3, kTied);
    // The embedding alone on cell 0, the head on the last cell: [1, L - K, 1, ...].
    std::string split = "[1, " + std::to_string(kLayers - K + 1);
    for (int k = 2; k < K; ++k) split += ", 1";
    split += "]";
    for (const std::string pipeline :
         {"{schedule: " + schedule + "}", "{balance: " + split + ", schedule: " + schedule + "}"}) {
      if (K == 1 && pipeline.find("balance") != std::string::npos) continue;
      Pipeline<double> p(parse_deck(gpt_deck(pipeline, kClipped, kTied), "gpt-deck"), MPI_COMM_WORLD);
      TrainResult r;
      for (int s = 0; s < 3; ++s) {
        const auto order = epoch_order(data().samples, 3, 0, true);
        p.step(data(), order, (s % 3) * kBatch, kBatch);
        r.norms.push_back(p.last_gradient_norm());
      }
      r.params = p.gather_parameters();
      const TiedPair pair = tied_pair(p, 0, kLayers - 1);
      if (world_rank() == 0) {
        const std::string what = "K = " + std::to_string(K) + ", " + pipeline;
        // The model's parameters hold the tied matrix once, at every K.
        EXPECT_EQ(std::int64_t(r.params.size()), p.total_parameters()) << what;
        EXPECT_EQ(pair.one_matrix, K == 1) << what;
        EXPECT_EQ(pair.e, pair.w) << what;  // two cells: bitwise equal copies
        EXPECT_EQ(std::vector<double>(r.params.begin(), r.params.begin() + n), pair.e) << what;
        EXPECT_EQ(r.params, one.params) << what;
        EXPECT_EQ(r.norms, one.norms) << what;
      }
    }
  }
  // The head starts from E, and one SGD step keeps W = E.
  const auto plain = "{type: sgd, momentum: 0, lr: 1}";
  Pipeline<double> start(parse_deck(gpt_deck("{}", plain, kTied), "gpt-deck"), MPI_COMM_WORLD);
  const auto p0 = start.gather_parameters();
  const TiedPair initial = tied_pair(start, 0, kLayers - 1);
  const auto order = epoch_order(data().samples, 3, 0, true);
  start.step(data(), order, 0, kBatch);
  const TiedPair stepped = tied_pair(start, 0, kLayers - 1);
  if (world_rank() == 0) {
    EXPECT_EQ(initial.e, initial.w);  // the head starts from E
    EXPECT_EQ(stepped.e, stepped.w);
    EXPECT_NE(stepped.e, initial.e);
  }
}

// With the head and the embedding on one rank (K = 1, or rank 0 of the V
// schedules, which run stages 0 and 2K - 1 there) the pair is one matrix:
// the rank's parameters hold it once (the model's count less V d), its
// gradients keep the head's V x d slot, writing E changes the head's
// weight (zeroing E zeroes every logit), and a checkpoint stores it once
// (the head's group has no weight), restarting on K cells bitwise.
TEST(LanguageModelPipeline, TiedPairOnOneRankIsOneMatrixCountedOnceAndRestartsAcrossK) {
  const std::int64_t n = kV * 6;
  const int K = world_size();
  long long pid = (long long)getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string path = "/tmp/gpipe_test_lm_tied_" + std::to_string(pid) + ".h5";
  TrainResult straight;
  if (world_rank() == 0) {
    Pipeline<double> untied(parse_deck(gpt_deck("{}", kClipped), "gpt-deck"), MPI_COMM_SELF);
    Pipeline<double> p(parse_deck(gpt_deck("{schedule: 1f1b}", kClipped, kTied), "gpt-deck"), MPI_COMM_SELF);
    const auto& cell = p.cell();
    EXPECT_TRUE(cell.shares_tied_weight());
    EXPECT_EQ(cell.shared_tied_head(), kLayers - 1);
    EXPECT_EQ(p.total_parameters(), untied.total_parameters() - n);
    EXPECT_EQ(std::int64_t(cell.parameters().extent(0)), p.total_parameters());
    EXPECT_EQ(std::int64_t(cell.gradients().extent(0)), p.total_parameters() + n);
    EXPECT_EQ(cell.value_offsets().back(), p.total_parameters());
    EXPECT_EQ(cell.parameter_offsets().back(), p.total_parameters() + n);
    // Two steps, a checkpoint, and the third step.
    for (int s = 0; s < 2; ++s) p.step(data(), epoch_order(data().samples, 3, 0, true), s * kBatch, kBatch);
    p.save_checkpoint(path);
    p.step(data(), epoch_order(data().samples, 3, 0, true), 2 * kBatch, kBatch);
    straight.params = p.gather_parameters();
    // Zeroing E zeroes the head's weight: every logit is 0.
    Kokkos::deep_copy(Kokkos::subview(p.cell().parameters(), std::make_pair(std::int64_t(0), n)), 0.0);
    const auto logits = p.predict(data().inputs.data(), 2);
    ASSERT_EQ(logits.size(), size_t(2 * kT * kV));
    for (double v : logits) ASSERT_EQ(v, 0.0);
    // The file holds the matrix once: in the embedding's group, not the head's.
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    EXPECT_GT(H5Lexists(file, "/layers/000_token_embedding/weight", H5P_DEFAULT), 0);
    EXPECT_GT(H5Lexists(file, "/layers/004_lm_head", H5P_DEFAULT), 0);
    EXPECT_EQ(H5Lexists(file, "/layers/004_lm_head/weight", H5P_DEFAULT), 0);
    EXPECT_EQ(H5Lexists(file, "/layers/004_lm_head/optimizer", H5P_DEFAULT), 0);
    H5Fclose(file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Restarted on K cells (the head on the last): the head's cell takes E and
  // its Adam moments, and the third step is bitwise the one-rank run's.
  for (const std::string pipeline : {"{schedule: 1f1b}", "{schedule: zb_v}"}) {
    if (pipeline.find("zb_v") != std::string::npos && 2 * K > kLayers) continue;
    Pipeline<double> p(parse_deck(gpt_deck(pipeline, kClipped, kTied), "gpt-deck"), MPI_COMM_WORLD);
    p.load_checkpoint(path);
    // zb_v runs stages 0 and 2K - 1 on rank 0: one matrix there at every K.
    EXPECT_EQ(p.cell().shares_tied_weight(), p.cell().rank() == 0 && (K == 1 || pipeline != "{schedule: 1f1b}")) << pipeline;
    p.step(data(), epoch_order(data().samples, 3, 0, true), 2 * kBatch, kBatch);
    const auto params = p.gather_parameters();
    const TiedPair pair = tied_pair(p, 0, kLayers - 1);
    if (world_rank() == 0) {
      EXPECT_EQ(params, straight.params) << "K = " << K << ", " << pipeline;
      EXPECT_EQ(pair.e, pair.w) << "K = " << K << ", " << pipeline;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

// The 1F1B family accumulates every layer's micro-batch gradients in
// micro-batch order (the whole-batch W of fill_drain is the one exception),
// so with tied embeddings and clipping on, 1f1b, zero_bubble,
// interleaved_1f1b (2 chunks), zb_v and dualpipe_v give bitwise the weights
// of 1f1b on one rank, at K = 1 (where the V schedules put both stages on
// rank 0) and at K = world size; in the V schedules rank 0 holds the
// embedding and the head: one matrix on a pipeline of K ranks.
TEST(LanguageModelPipeline, TiedEmbeddingsBitwiseAcrossTheOneFOneBFamily) {
  const std::string deep =
      "[{type: token_embedding, vocabulary: 7, width: 6}, {type: pos_embed}, "
      "{type: transformer_block, heads: 2, hidden: 8}, {type: transformer_block, heads: 2, hidden: 5}, "
      "{type: transformer_block, heads: 3, hidden: 4}, {type: transformer_block, heads: 2, hidden: 6}, "
      "{type: transformer_block, heads: 1, hidden: 7}, {type: transformer_block, heads: 2, hidden: 3}, "
      "{type: lm_head, vocabulary: 7, tie: token_embedding}]";
  const int layers = 9, K = world_size();
  const auto run = [&](const std::string& pipeline, MPI_Comm comm) {
    // M = 12 micro-batches of one sequence: a multiple of every K (interleaved_1f1b needs one).
    std::string text = gpt_deck(pipeline, kClipped, deep);
    text.replace(text.find("batch_size: 6, micro_batches: 3"), 31, "batch_size: 12, micro_batches: 12");
    Pipeline<double> p(parse_deck(text, "gpt-deck"), comm);
    TrainResult r;
    for (int s = 0; s < 3; ++s) {
      const auto sums = p.step(data(), epoch_order(data().samples, 3, 0, true), (s % 2) * kBatch, 2 * kBatch);
      r.norms.push_back(p.last_gradient_norm());
      r.losses.push_back(p.from_last(sums.loss));
    }
    r.params = p.gather_parameters();
    const TiedPair pair = tied_pair(p, 0, layers - 1);
    if (world_rank() == 0) EXPECT_EQ(pair.e, pair.w) << pipeline;
    return std::make_pair(r, pair.one_matrix);
  };
  TrainResult reference;
  if (world_rank() == 0) {
    reference = run("{schedule: 1f1b}", MPI_COMM_SELF).first;
    for (double norm : reference.norms) EXPECT_GT(norm, 0.05);  // the clip is active
  }
  const std::vector<std::pair<std::string, int>> schedules = {  // {pipeline, stages per rank}
      {"{schedule: 1f1b}", 1},
      {"{schedule: zero_bubble}", 1},
      {"{schedule: interleaved_1f1b, chunks: 2}", 2},
      {"{schedule: zb_v}", 2},
      {"{schedule: dualpipe_v}", 2},
      {"{schedule: zb_v, remat: always}", 2}};
  for (const auto& [pipeline, per_rank] : schedules) {
    for (const bool one_rank : {true, false}) {
      if (one_rank ? world_rank() != 0 : K * per_rank > layers) continue;
      const auto [r, one_matrix] = run(pipeline, one_rank ? MPI_COMM_SELF : MPI_COMM_WORLD);
      if (world_rank() != 0) continue;
      const std::string what = (one_rank ? "K = 1, " : "K = " + std::to_string(K) + ", ") + pipeline;
      EXPECT_EQ(r.params, reference.params) << what;
      EXPECT_EQ(r.norms, reference.norms) << what;
      EXPECT_EQ(r.losses, reference.losses) << what;
      // One matrix where rank 0 runs the first and the last stage.
      const bool v = pipeline.find("_v") != std::string::npos;
      EXPECT_EQ(one_matrix, one_rank || v || K == 1) << what;
    }
  }
}

// Tied embeddings with replicas: D = 2 replicas of K = 2 cells (4 ranks),
// the embedding alone on cell 0 and the head on cell 1, so each replica's
// tie exchange runs between its own two cells after the replicas'
// gradient reduction: the weights stay one matrix (E = W), equal on both
// replicas, and bitwise those of D = 2 replicas of one cell (ranks 0 and 1,
// where the pair is one matrix and the head's gradient slot is reduced with
// the rest), with clipping and the warm-up on.
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
    const TiedPair pair = tied_pair(p, 0, kLayers - 1);  // on each replica's pipeline
    if (p.cell().rank() == 0) {
      EXPECT_EQ(pair.e, pair.w);
      EXPECT_EQ(std::vector<double>(r.params.begin(), r.params.begin() + n), pair.e);
    }
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
    ASSERT_GT(split.params.size(), size_t(n));
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

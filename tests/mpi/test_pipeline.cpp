// GPipe invariants across MPI ranks (ctest runs this at 1, 2, 3 and 4 ranks):
// partition independence, micro-batch equivalence, invisible
// re-materialization, no deadlock in corner cases, activation memory, errors.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/runtime.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

// 9 layers with every layer type, Dropout included.
const std::string kLayers = test::kNineLayers;
constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 15;
using test::world_rank;
using test::world_size;


using Result = test::PipelineRun;

// Trains `steps` steps of the deck on `comm`; parameters gathered on its rank 0.
Result train(const std::string& text, MPI_Comm comm, int steps = 3) {
  return test::run_pipeline(parse_deck(text, "test-deck"), test::synthetic(kBatch * 2, kInput, 3, 99), kBatch, comm,
                            steps);
}

// The K = 1 result, computed on rank 0 alone (others get an empty result).
Result reference(const std::string& text) {
  Result r;
  if (world_rank() == 0) r = train(text, MPI_COMM_SELF);
  return r;
}

TEST(Pipeline, PartitionIndependenceBitwise) {
  const int K = world_size();
  const std::string deck = test::deck_text(kLayers, kInput, kBatch, 4);
  const Result ref = reference(deck);
  std::vector<std::string> pipelines = {"{balance: params}", "{balance: flops}"};
  // Explicit partitions: the big cell first, then last.
  std::string front = "[" + std::to_string(9 - (K - 1)), back = "[";
  for (int k = 1; k < K; ++k) front += ", 1";
  for (int k = 1; k < K; ++k) back += "1, ";
  pipelines.push_back("{balance: " + front + "]}");
  pipelines.push_back("{balance: " + back + std::to_string(9 - (K - 1)) + "]}");
  for (const auto& p : pipelines) {
    const Result r = train(test::deck_text(kLayers, kInput, kBatch, 4, "double", p), MPI_COMM_WORLD);
    if (world_rank() == 0) {
      ASSERT_EQ(r.params.size(), ref.params.size()) << p;
      EXPECT_EQ(r.params, ref.params) << "K = " << K << ", pipeline " << p;
      EXPECT_EQ(r.eval.loss, ref.eval.loss) << p;
    }
    EXPECT_GT(r.eval.accuracy, 0.0);  // the evaluation reached every rank
  }
}

TEST(Pipeline, MicroBatchEquivalence) {
  const std::string sgd = "{type: sgd, lr: 0.05, momentum: 0.9}";
  const Result m1 = train(test::deck_text(kLayers, kInput, kBatch, 1, "double", "{}", sgd),
                          MPI_COMM_WORLD);
  for (int M : {2, 4, 7}) {  // 15 = 4+4+4+3 and 3+2+2+2+2+2+2: uneven splits
    const Result r = train(test::deck_text(kLayers, kInput, kBatch, M, "double", "{}", sgd),
                           MPI_COMM_WORLD);
    if (world_rank() == 0) {
      ASSERT_EQ(r.params.size(), m1.params.size());
      double worst = 0;
      for (size_t i = 0; i < r.params.size(); ++i)
        worst = std::max(worst, std::abs(r.params[i] - m1.params[i]));
      EXPECT_LT(worst, 1e-13) << "M = " << M;
      EXPECT_NEAR(r.eval.loss, m1.eval.loss, 1e-12) << "M = " << M;
    }
  }
}

TEST(Pipeline, RematerializationIsInvisibleBitwise) {
  const Result never = train(test::deck_text(kLayers, kInput, kBatch, 4, "double", "{remat: never}"),
                             MPI_COMM_WORLD);
  for (const char* mode : {"always", "except_last"}) {
    const Result r = train(test::deck_text(kLayers, kInput, kBatch, 4, "double",
                                           std::string("{remat: ") + mode + "}"),
                           MPI_COMM_WORLD);
    if (world_rank() == 0) EXPECT_EQ(r.params, never.params) << mode;
  }
}

TEST(Pipeline, NoDeadlockInCornerCases) {
  const Result ref1 = reference(test::deck_text(kLayers, kInput, kBatch, 1));
  const Result refN = reference(test::deck_text(kLayers, kInput, kBatch, int(kBatch)));
  // M = 1 (< K for K > 1) and M = N, with and without re-materialization.
  for (const char* remat : {"never", "always"}) {
    const std::string p = std::string("{remat: ") + remat + "}";
    const Result a = train(test::deck_text(kLayers, kInput, kBatch, 1, "double", p), MPI_COMM_WORLD);
    const Result b = train(test::deck_text(kLayers, kInput, kBatch, int(kBatch), "double", p),
                           MPI_COMM_WORLD);
    if (world_rank() == 0) {
      EXPECT_EQ(a.params, ref1.params) << remat;
      EXPECT_EQ(b.params, refN.params) << remat;
    }
  }
}

TEST(Pipeline, OneLayerPerCell) {
  const int K = world_size();
  std::string layers = "[";
  for (int k = 0; k < K; ++k) layers += (k ? ", " : "") + std::string("{type: dense, units: ") +
                                        std::to_string(k + 1 == K ? 3 : 7) + "}";
  layers += "]";
  const std::string deck = test::deck_text(layers, kInput, kBatch, 3, "double", "{remat: always}");
  const Result ref = reference(deck);
  const Result r = train(deck, MPI_COMM_WORLD);
  if (world_rank() == 0) EXPECT_EQ(r.params, ref.params);
}

// Expected activation bytes of each cell, from the shapes (docs/design.md).
std::vector<std::int64_t> expected_bytes(const std::vector<int>& counts, int M, bool remat) {
  const std::vector<std::int64_t> in = {6, 10, 10, 10, 10, 8, 8, 5, 5};   // layer inputs
  const std::vector<std::int64_t> out = {10, 10, 10, 10, 8, 8, 5, 5, 3};  // layer outputs
  const std::vector<std::int64_t> saved = {0, 0, 2, 0, 0, 0, 0, 0, 0};    // per sample (layer_norm)
  const std::int64_t rows = (kBatch + M - 1) / M, word = sizeof(double);
  std::vector<std::int64_t> bytes;
  int first = 0;
  for (int c : counts) {
    std::int64_t b = M * rows * in[size_t(first)];           // kept micro-batch inputs
    std::int64_t hidden = 0;                                 // outputs of all but the last layer
    for (int l = first; l < first + c - 1; ++l) hidden += out[size_t(l)];
    b += (remat ? 1 : M) * rows * hidden;                    // scratch (remat) or kept per micro-batch
    const bool last = first + c == 9;
    b += (last ? 1 : M) * rows * out[size_t(first + c - 1)]; // logits, or output send buffers
    for (int l = first; l < first + c; ++l)                  // saved state: like kept outputs,
      b += (remat && l + 1 < first + c ? 1 : M) * rows * saved[size_t(l)];  // last layer per micro-batch
    // fill_drain's whole-batch W (M > 1): every Dense's output gradient over
    // the batch, and its input: one shared buffer of the widest (never) or
    // one per Dense (re-materialization).
    std::int64_t dense_out = 0, dense_in = 0, widest = 0;
    for (int l = first; l < first + c; ++l)
      if (l % 2 == 0 && l != 2) {  // layers 0, 4, 6, 8 are Dense
        dense_out += out[size_t(l)];
        if (l == 0) continue;  // the first cell's first layer reads the batch
        dense_in += in[size_t(l)];
        widest = std::max(widest, in[size_t(l)]);
      }
    if (M > 1) b += kBatch * (dense_out + (remat ? dense_in : widest));
    bytes.push_back(b * word);
    first += c;
  }
  return bytes;
}

TEST(Pipeline, ActivationBytesMatchFormula) {
  const int K = world_size(), M = 5;
  std::string counts = "[" + std::to_string(9 - (K - 1));
  std::vector<int> list = {9 - (K - 1)};
  for (int k = 1; k < K; ++k) {
    counts += ", 1";
    list.push_back(1);
  }
  counts += "]";
  for (bool remat : {false, true}) {
    const std::string p = "{balance: " + counts + ", remat: " + (remat ? "always" : "never") + "}";
    const Result r = train(test::deck_text(kLayers, kInput, kBatch, M, "double", p), MPI_COMM_WORLD, 1);
    EXPECT_EQ(r.activation_bytes, expected_bytes(list, M, remat)) << p;
  }
  if (K == 1) {
    // O(N L) without re-materialization against O(N + L N / M) with it:
    // 3 x (48 hidden features + 2 saved layer_norm statistics) x 8 bytes
    // saved per extra micro-batch row.
    const auto never = expected_bytes({9}, M, false)[0], always = expected_bytes({9}, M, true)[0];
    // fill_drain's whole-batch W keeps the inputs of Dense layers 4, 6, 8
    // (10, 8, 5 wide) per layer with re-materialization, in one buffer of
    // the widest (10) without.
    EXPECT_EQ(never - always, (M - 1) * 3 * (10 + 10 + 10 + 10 + 8 + 8 + 5 + 5 + 2) * 8 -
                                  kBatch * ((10 + 8 + 5) - 10) * 8);
  }
}

TEST(PipelineErrors, MoreRanksThanLayers) {
  const int K = world_size();
  if (K < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const Deck deck = parse_deck(test::deck_text("[{type: dense, units: 3}]", kInput, kBatch, 2), "d");
  try {
    Pipeline<double> t(deck, MPI_COMM_WORLD);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "pipeline: " + std::to_string(K) + " cells (MPI ranks) but the model has only 1 "
              "layers; every cell needs at least one layer (run with at most 1 ranks)");
  }
}

TEST(PipelineErrors, ExplicitListMustSumToLayers) {
  const int K = world_size();
  std::string counts = "[";
  for (int k = 0; k < K; ++k) counts += (k ? ", " : "") + std::string("1");
  counts += "]";
  const Deck deck = parse_deck(
      test::deck_text(kLayers, kInput, kBatch, 2, "double", "{balance: " + counts + "}"), "d");
  try {
    Pipeline<double> t(deck, MPI_COMM_WORLD);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "pipeline.balance: the layer counts sum to " +
                                         std::to_string(K) + " but the model has 9 layers");
  }
}

TEST(Transport, ReceivedSizeIsChecked) {
  if (world_size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const int rank = world_rank();
  Communicator comm(MPI_COMM_WORLD);
  BoundaryBuffer<double> buffer("test::boundary", 4, 3);
  if (rank == 0) {
    buffer.post_send(comm.get(), 1, forward_tag(2), 1);  // 1 row of 3 values
    buffer.wait();
  } else if (rank == 1) {
    buffer.post_recv(comm.get(), 0, forward_tag(2), 2, "forward activation", 2);
    try {
      buffer.wait();
      ADD_FAILURE() << "expected PipelineError";
    } catch (const PipelineError& e) {
      EXPECT_STREQ(e.what(), "rank 1: the forward activation of micro-batch 2 from rank 0 has 3 "
                             "values, expected 2x3 = 6");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Request owners: move-only; an abandoned receive is cancelled and its
// request freed (its buffer replaced if MPI cannot confirm the cancel); the
// object then serves new receives.
TEST(Transport, AbandonedReceiveIsCancelledAndFreed) {
  static_assert(!std::is_copy_constructible<BoundaryBuffer<double>>::value);
  static_assert(std::is_nothrow_move_constructible<BoundaryBuffer<double>>::value);
  Communicator comm(MPI_COMM_WORLD);
  const int rank = world_rank(), size = world_size();
  const int prev = (rank + size - 1) % size, next = (rank + 1) % size;
  BoundaryBuffer<double> buffer("test::abandoned", 2, 3);
  buffer.post_recv(comm.get(), prev, forward_tag(40), 1, "forward activation", 40);  // never sent
  EXPECT_TRUE(buffer.pending());
  buffer.cancel();
  EXPECT_FALSE(buffer.pending());
  EXPECT_EQ(buffer.rows(2).extent(0), 2u);
  BoundaryBuffer<double> moved(std::move(buffer));
  EXPECT_FALSE(moved.pending());
  // A new receive (another tag: one with the abandoned tag could still be
  // matched by a receive that MPI failed to cancel) completes into it.
  BoundaryBuffer<double> out("test::out", 2, 3);
  Kokkos::deep_copy(out.rows(2), double(rank + 1));
  moved.post_recv(comm.get(), prev, forward_tag(41), 1, "forward activation", 41);
  out.post_send(comm.get(), next, forward_tag(41), 1);
  moved.wait();
  out.wait();
  EXPECT_EQ(test::to_host(moved.rows(1)), std::vector<double>(3, double(prev + 1)));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Runtime, ThreadLevelTheBackendNeeds) {
  const bool serial = std::string(ExecSpace::name()) == "Serial";
  EXPECT_EQ(required_mpi_thread_level(), serial ? MPI_THREAD_SINGLE : MPI_THREAD_FUNNELED);
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  EXPECT_GE(provided, required_mpi_thread_level());
}

}  // namespace
}  // namespace gpipe

// GPipe invariants on a small CNN (conv2d, batchnorm2d, maxpool2d,
// avgpool2d, flatten, dropout, dense), at 1-4 ranks: bitwise equal weights after 3 steps at any
// K with the same M, re-materialization invisible, and a restart from a
// K = 2 checkpoint on 1 rank bitwise equal to an uninterrupted run.

#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

const std::string kLayers = test::kSmallCnn;  // 9 layers, input [2, 6, 7], 3 classes
constexpr int kLayerCount = 9;
constexpr std::int64_t kFeatures = 2 * 6 * 7, kBatch = 10;

std::string deck_text(int M, const std::string& pipeline) {
  return "seed: 5\nprecision: double\nmodel:\n  input: [2, 6, 7]\n  layers: " + kLayers +
         "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}"
         "\ntraining: {epochs: 1, batch_size: " + std::to_string(kBatch) +
         ", micro_batches: " + std::to_string(M) + "}\noptimizer: {type: adam, lr: 0.01}\npipeline: " +
         pipeline + "\n";
}

const Dataset& data() {
  static const Dataset d = test::synthetic(kBatch * 2, kFeatures, 3, 13);
  return d;
}

void run(Pipeline<double>& p, std::int64_t from, std::int64_t to) {
  test::run_steps(p, data(), 5, 2, kBatch, from, to);
}

// Parameters after `steps` steps, then the evaluation loss (which reads
// BatchNorm's running statistics), all on rank 0 of `comm`.
std::vector<double> train(const std::string& text, MPI_Comm comm, int steps = 3) {
  Pipeline<double> p(parse_deck(text, "cnn-deck"), comm);
  run(p, 0, steps);
  auto out = p.gather_parameters();
  out.push_back(p.evaluate(data()).loss);
  return out;
}

TEST(CnnPipeline, PartitionIndependenceBitwise) {
  const int K = world_size();
  std::vector<double> reference;
  if (world_rank() == 0) reference = train(deck_text(4, "{}"), MPI_COMM_SELF);
  std::string front = "[" + std::to_string(kLayerCount - (K - 1)), back = "[";
  for (int k = 1; k < K; ++k) {
    front += ", 1";
    back += "1, ";
  }
  for (const std::string& p : {std::string("{balance: flops}"), std::string("{balance: params}"),
                               "{balance: " + front + "]}",
                               "{balance: " + back + std::to_string(kLayerCount - (K - 1)) + "]}"}) {
    const auto params = train(deck_text(4, p), MPI_COMM_WORLD);
    if (world_rank() == 0) {
      ASSERT_EQ(params.size(), reference.size());
      EXPECT_EQ(params, reference) << "K = " << K << ", pipeline " << p;
    }
  }
}

TEST(CnnPipeline, RematerializationIsInvisibleBitwise) {
  const auto never = train(deck_text(4, "{remat: never}"), MPI_COMM_WORLD);
  for (const char* mode : {"always", "except_last"}) {
    const auto r = train(deck_text(4, std::string("{remat: ") + mode + "}"), MPI_COMM_WORLD);
    if (world_rank() == 0) EXPECT_EQ(r, never) << mode;
  }
}

TEST(CnnPipeline, RestartFromTwoCellsOnOneBitwise) {
  if (world_size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const std::string text = deck_text(4, "{remat: always}");
  const std::string dir = ::testing::TempDir() + "gpipe_cnn_restart_" + std::to_string(world_size());
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < 2 ? 0 : MPI_UNDEFINED, world_rank(), &two);
  if (two != MPI_COMM_NULL) {
    Pipeline<double> p(parse_deck(text, "cnn-deck"), two);
    run(p, 0, 3);
    p.save_checkpoint(checkpoint_path(dir, 3));
    MPI_Comm_free(&two);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const auto reference = train(text, MPI_COMM_SELF, 6);
    Pipeline<double> one(parse_deck(text, "cnn-deck"), MPI_COMM_SELF);
    one.load_checkpoint(checkpoint_path(dir, 3));
    run(one, 3, 6);
    auto restarted = one.gather_parameters();
    restarted.push_back(one.evaluate(data()).loss);  // running statistics restored too
    EXPECT_EQ(restarted, reference);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace gpipe

// GPipe invariants on a small Vision Transformer (ctest runs this at 1, 2, 3
// and 4 ranks): bitwise equal weights after 3 steps for every number of
// cells K at the same M, re-materialization invisible bitwise (attention
// probabilities and the other saved state are recomputed, Dropout masks
// included), and a restart on 1 rank from a checkpoint written by 2 cells.

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

// 1 x 4 x 6 images -> 6 tokens of width 6 (2 heads of width 3) -> 3 classes; 7 layers.
const std::string kViT =
    "[{type: patch_embed, patch: 2, width: 6}, {type: pos_embed}, "
    "{type: transformer_block, heads: 2, hidden: 8, dropout: 0.2}, "
    "{type: transformer_block, heads: 2, hidden: 5}, {type: token_mean}, {type: layer_norm}, "
    "{type: dense, units: 3}]";
constexpr std::int64_t kLayers = 7, kFeatures = 24, kBatch = 10;

std::string vit_deck(const std::string& pipeline) {
  return "seed: 7\nprecision: double\nmodel:\n  input: [1, 4, 6]\n  layers: " + kViT +
         "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}"
         "\ntraining: {epochs: 1, batch_size: " + std::to_string(kBatch) +
         ", micro_batches: 3}\noptimizer: {type: adam, lr: 0.01}\npipeline: " + pipeline + "\n";
}

const Dataset& data() {
  static const Dataset d = test::synthetic(kBatch * 3, kFeatures, 3, 41);
  return d;
}

void run(Pipeline<double>& p, std::int64_t from, std::int64_t to) {
  test::run_steps(p, data(), 7, 3, kBatch, from, to);
}

std::vector<double> train(const std::string& pipeline, MPI_Comm comm, int steps = 3) {
  Pipeline<double> p(parse_deck(vit_deck(pipeline), "vit-deck"), comm);
  run(p, 0, steps);
  return p.gather_parameters();
}

TEST(ViTPipeline, PartitionIndependenceBitwise) {
  const int K = world_size();
  std::vector<double> reference;
  if (world_rank() == 0) reference = train("{}", MPI_COMM_SELF);
  std::string front = "[" + std::to_string(kLayers - (K - 1)), back = "[";
  for (int k = 1; k < K; ++k) front += ", 1";
  for (int k = 1; k < K; ++k) back += "1, ";
  for (const std::string p : {std::string("{balance: flops}"), std::string("{balance: params}"),
                              "{balance: " + front + "]}",
                              "{balance: " + back + std::to_string(kLayers - (K - 1)) + "]}"}) {
    const auto r = train(p, MPI_COMM_WORLD);
    if (world_rank() == 0) EXPECT_EQ(r, reference) << "K = " << K << ", pipeline " << p;
  }
}

TEST(ViTPipeline, RematerializationIsInvisibleBitwise) {
  const auto never = train("{remat: never}", MPI_COMM_WORLD);
  for (const char* mode : {"always", "except_last"}) {
    const auto r = train(std::string("{remat: ") + mode + "}", MPI_COMM_WORLD);
    if (world_rank() == 0) EXPECT_EQ(r, never) << mode;
  }
}

TEST(ViTPipeline, RestartOnOneRankFromTwoCellsBitwise) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks to write the checkpoint";
  const std::string dir = ::testing::TempDir() + "gpipe_vit_restart_" + std::to_string(world_size());
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < 2 ? 0 : MPI_UNDEFINED, world_rank(), &two);
  if (two != MPI_COMM_NULL) {
    Pipeline<double> p(parse_deck(vit_deck("{remat: always}"), "vit-deck"), two);
    run(p, 0, 3);
    p.save_checkpoint(checkpoint_path(dir, 3));
  }
  if (two != MPI_COMM_NULL) MPI_Comm_free(&two);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const auto reference = train("{}", MPI_COMM_SELF, 6);
    Pipeline<double> one(parse_deck(vit_deck("{}"), "vit-deck"), MPI_COMM_SELF);
    EXPECT_EQ(one.load_checkpoint(checkpoint_path(dir, 3)).step, 3);
    run(one, 3, 6);
    EXPECT_EQ(one.gather_parameters(), reference);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace gpipe

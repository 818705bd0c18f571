// The C API (gpipe/gpipe.h): every function, its error codes and messages,
// and a training run through it that gives the C++ API's weights bitwise.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/gpipe.h"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

const std::string kDeck = test::deck_text(
    "[{type: dense, units: 12}, {type: relu}, {type: dropout, rate: 0.1}, {type: dense, units: 4}]", 5,
    8, 2, "double", "{}", "{type: adamw, lr: 0.01, weight_decay: 0.01}");

struct Batch {
  std::vector<float> inputs;
  std::vector<std::int32_t> labels;
};
Batch batch(std::uint64_t seed) {
  const Dataset d = test::synthetic(8, 5, 4, seed);
  return {d.inputs, d.labels};
}

// After rejected calls the trainer still takes the same step as a fresh
// trainer's first (bitwise); then destroys it.
void expect_usable_then_destroy(gpipe_trainer* t, const Batch& b) {
  double loss = -1, fresh_loss = -2;
  ASSERT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), 8, &loss), GPIPE_OK) << gpipe_last_error();
  gpipe_trainer* fresh = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &fresh), GPIPE_OK);
  ASSERT_EQ(gpipe_train_step(fresh, b.inputs.data(), b.labels.data(), 8, &fresh_loss), GPIPE_OK);
  EXPECT_EQ(loss, fresh_loss);
  EXPECT_EQ(gpipe_destroy(fresh), GPIPE_OK);
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

TEST(CApi, InitializeIsIdempotentWhenKokkosIsUp) {
  EXPECT_EQ(gpipe_initialize(nullptr, nullptr), GPIPE_OK);
  EXPECT_EQ(gpipe_finalize(), GPIPE_OK);  // does not finalize the test's Kokkos
  EXPECT_TRUE(Kokkos::is_initialized());
}

TEST(CApi, NullArgumentsAndBadDecks) {
  gpipe_trainer* t = nullptr;
  EXPECT_EQ(gpipe_create_from_string(nullptr, MPI_COMM_WORLD, &t), GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_create_from_string: deck_yaml and out must not be NULL");
  EXPECT_EQ(gpipe_train_step(nullptr, nullptr, nullptr, 1, nullptr), GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_train_step: trainer, inputs and labels must not be NULL");
  EXPECT_EQ(gpipe_dimensions(nullptr, nullptr, nullptr, nullptr), GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_dimensions: trainer is NULL");
  EXPECT_EQ(gpipe_destroy(nullptr), GPIPE_OK);

  EXPECT_EQ(gpipe_create_from_string("model: [", MPI_COMM_WORLD, &t), GPIPE_ERROR_INPUT);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(std::string(gpipe_last_error()).rfind("<deck string>:", 0), 0u) << gpipe_last_error();
  EXPECT_EQ(gpipe_create_from_file("/nonexistent.yaml", MPI_COMM_WORLD, &t), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "/nonexistent.yaml: cannot open input deck (missing or unreadable)");
}

TEST(CApi, WrongSizesAndLabels) {
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  int64_t features = 0, classes = 0, max_batch = 0;
  ASSERT_EQ(gpipe_dimensions(t, &features, &classes, &max_batch), GPIPE_OK);
  EXPECT_EQ(features, 5);
  EXPECT_EQ(classes, 4);
  EXPECT_EQ(max_batch, 8);
  Batch b = batch(1);
  EXPECT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), 9, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_train_step: n = 9 samples, expected 2 (micro_batches) to 8 (batch_size)");
  b.labels[3] = 4;
  EXPECT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), 8, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_train_step: labels[3] = 4 is outside [0, 4)");
  std::vector<float> logits(8 * 4);
  EXPECT_EQ(gpipe_predict(t, b.inputs.data(), 0, logits.data()), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_predict: n = 0 samples, expected at least 1");
  int64_t count = 0;
  ASSERT_EQ(gpipe_parameter_count(t, &count), GPIPE_OK);
  EXPECT_EQ(count, 5 * 12 + 12 + 12 * 4 + 4);
  std::vector<double> p(static_cast<size_t>(count));
  EXPECT_EQ(gpipe_get_parameters(t, p.data(), count - 1), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_get_parameters: count = 123, the model has 124 parameters");
  EXPECT_EQ(gpipe_load_checkpoint(t, "/nonexistent.h5"), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "/nonexistent.h5: checkpoint not found");
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

TEST(CApi, TrainingMatchesTheCppApiBitwise) {
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  Pipeline<double> cpp(parse_deck(kDeck, "d"), MPI_COMM_WORLD);
  double loss = -1;
  for (std::uint64_t s = 0; s < 3; ++s) {
    const Batch b = batch(10 + s);
    ASSERT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), 8, &loss), GPIPE_OK) << gpipe_last_error();
    const LossSums sums = cpp.step(b.inputs.data(), b.labels.data(), 8);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double expected = sums.loss;
    MPI_Bcast(&expected, 1, MPI_DOUBLE, size - 1, MPI_COMM_WORLD);
    EXPECT_EQ(loss, expected / 8);
  }
  int64_t count = 0;
  gpipe_parameter_count(t, &count);
  std::vector<double> c_params(static_cast<size_t>(count));
  ASSERT_EQ(gpipe_get_parameters(t, c_params.data(), count), GPIPE_OK);
  const auto cpp_params = cpp.gather_parameters();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) EXPECT_EQ(c_params, cpp_params);

  // Inference: the logits reproduce the evaluation loss of the same samples.
  const Batch b = batch(99);
  std::vector<float> logits(8 * 4);
  ASSERT_EQ(gpipe_predict(t, b.inputs.data(), 8, logits.data()), GPIPE_OK) << gpipe_last_error();
  Dataset d;
  d.samples = 8;
  d.features = 5;
  d.inputs = b.inputs;
  d.labels = b.labels;
  const Evaluation e = cpp.evaluate(d);
  double sum = 0;
  for (int i = 0; i < 8; ++i) {
    double z = 0;
    for (int j = 0; j < 4; ++j) z += std::exp(double(logits[size_t(i * 4 + j)]));
    sum += std::log(z) - logits[size_t(i * 4 + b.labels[size_t(i)])];
  }
  EXPECT_NEAR(sum / 8, e.loss, 1e-6);  // logits are float32

  // Checkpoint round trip through the C API.
  const std::string path = ::testing::TempDir() + "gpipe_capi_" + std::to_string(count) + ".h5";
  ASSERT_EQ(gpipe_save_checkpoint(t, path.c_str()), GPIPE_OK) << gpipe_last_error();
  gpipe_trainer* restored = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &restored), GPIPE_OK);
  ASSERT_EQ(gpipe_load_checkpoint(restored, path.c_str()), GPIPE_OK) << gpipe_last_error();
  std::vector<double> r_params(static_cast<size_t>(count));
  ASSERT_EQ(gpipe_get_parameters(restored, r_params.data(), count), GPIPE_OK);
  EXPECT_EQ(r_params, c_params);
  EXPECT_EQ(gpipe_destroy(restored), GPIPE_OK);
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

// The learning-rate schedule is a function of the step and the total step
// count the API user sets: cosine and constant differ; cosine without a total
// is an error, not a silent constant rate; the C API equals the C++ Pipeline.
TEST(CApi, CosineScheduleFollowsTheTotalStepsTheUserSets) {
  const std::string constant = test::deck_text("[{type: dense, units: 6}, {type: tanh}, {type: dense, units: 6}, {type: relu}, {type: dense, units: 4}]",
                                               5, 8, 2, "double", "{}", "{type: adam, lr: 0.01}");
  const std::string cosine = test::deck_text("[{type: dense, units: 6}, {type: tanh}, {type: dense, units: 6}, {type: relu}, {type: dense, units: 4}]",
                                             5, 8, 2, "double", "{}",
                                             "{type: adam, lr: 0.01, schedule: cosine}");
  gpipe_trainer *a = nullptr, *b = nullptr;
  ASSERT_EQ(gpipe_create_from_string(constant.c_str(), MPI_COMM_WORLD, &a), GPIPE_OK) << gpipe_last_error();
  ASSERT_EQ(gpipe_create_from_string(cosine.c_str(), MPI_COMM_WORLD, &b), GPIPE_OK) << gpipe_last_error();
  const Batch first = batch(1);
  EXPECT_EQ(gpipe_train_step(b, first.inputs.data(), first.labels.data(), 8, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(),
               "optimizer.schedule: cosine decays over the run's total step count, which is not set: "
               "call set_total_steps (C API: gpipe_set_total_steps) before the first step");
  EXPECT_EQ(gpipe_set_total_steps(b, -1), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(), "gpipe_set_total_steps: total_steps = -1, expected >= 0");
  EXPECT_EQ(gpipe_set_total_steps(nullptr, 20), GPIPE_ERROR_NULL_ARGUMENT);
  ASSERT_EQ(gpipe_set_total_steps(a, 20), GPIPE_OK);
  ASSERT_EQ(gpipe_set_total_steps(b, 20), GPIPE_OK);
  Pipeline<double> cpp(parse_deck(cosine, "d"), MPI_COMM_WORLD);
  cpp.set_total_steps(20);
  for (std::uint64_t s = 0; s < 20; ++s) {
    const Batch x = batch(30 + s);
    ASSERT_EQ(gpipe_train_step(a, x.inputs.data(), x.labels.data(), 8, nullptr), GPIPE_OK);
    ASSERT_EQ(gpipe_train_step(b, x.inputs.data(), x.labels.data(), 8, nullptr), GPIPE_OK);
    cpp.step(x.inputs.data(), x.labels.data(), 8);
  }
  EXPECT_EQ(cpp.next_learning_rate(), 0.0);  // cos(pi) at the end of the run
  int64_t count = 0;
  gpipe_parameter_count(a, &count);
  std::vector<double> pa(static_cast<size_t>(count)), pb(pa.size());
  ASSERT_EQ(gpipe_get_parameters(a, pa.data(), count), GPIPE_OK);
  ASSERT_EQ(gpipe_get_parameters(b, pb.data(), count), GPIPE_OK);
  const auto expected = cpp.gather_parameters();
  if (test::world_rank() == 0) {
    EXPECT_EQ(pb, expected);
    std::size_t differing = 0;
    for (std::size_t i = 0; i < pa.size(); ++i) differing += pa[i] != pb[i];
    EXPECT_GT(differing, pa.size() / 2) << "the cosine schedule changed almost nothing";
  }
  EXPECT_EQ(gpipe_destroy(a), GPIPE_OK);
  EXPECT_EQ(gpipe_destroy(b), GPIPE_OK);
}

// The layout comes from the deck: all ranks as data-parallel replicas of one
// cell (D x 1); the C API trains exactly as the C++ Pipeline on the same grid.
TEST(CApi, DataParallelLayout) {
  const std::string deck = kDeck + "parallel: {cells: 1}\n";
  const int R = test::world_size();
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(deck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  int replicas = 0, cells = 0, replica = -1, cell = -1;
  ASSERT_EQ(gpipe_layout(t, &replicas, &cells, &replica, &cell), GPIPE_OK);
  EXPECT_EQ(replicas, R);
  EXPECT_EQ(cells, 1);
  EXPECT_EQ(replica, test::world_rank());
  EXPECT_EQ(cell, 0);
  EXPECT_EQ(gpipe_layout(nullptr, nullptr, nullptr, nullptr, nullptr), GPIPE_ERROR_NULL_ARGUMENT);
  const Batch b = batch(5);
  if (R > 1) {  // each of the R shards needs micro_batches = 2 samples
    EXPECT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), 2 * R - 1, nullptr), GPIPE_ERROR_INPUT);
    EXPECT_EQ(std::string(gpipe_last_error()),
              "gpipe_train_step: n = " + std::to_string(2 * R - 1) + " samples, expected " +
                  std::to_string(2 * R) + " (replicas x micro_batches) to 8 (batch_size)");
  }
  Pipeline<double> cpp(parse_deck(deck, "d"), MPI_COMM_WORLD);
  for (std::uint64_t s = 0; s < 3; ++s) {
    const Batch x = batch(40 + s);
    double loss = -1;
    ASSERT_EQ(gpipe_train_step(t, x.inputs.data(), x.labels.data(), 8, &loss), GPIPE_OK) << gpipe_last_error();
    EXPECT_EQ(loss, cpp.from_last(cpp.step(x.inputs.data(), x.labels.data(), 8).loss) / 8);
  }
  int64_t count = 0;
  gpipe_parameter_count(t, &count);
  std::vector<double> params(static_cast<size_t>(count));
  ASSERT_EQ(gpipe_get_parameters(t, params.data(), count), GPIPE_OK);
  const auto expected = cpp.gather_parameters();
  if (test::world_rank() == 0) EXPECT_EQ(params, expected);
  EXPECT_TRUE(cpp.replicas_identical());
  std::vector<float> logits(8 * 4), reference(8 * 4);
  ASSERT_EQ(gpipe_predict(t, b.inputs.data(), 8, logits.data()), GPIPE_OK) << gpipe_last_error();
  const auto cpp_logits = cpp.predict(b.inputs.data(), 8);
  for (size_t i = 0; i < reference.size(); ++i) reference[i] = float(cpp_logits[i]);
  EXPECT_EQ(logits, reference);  // every replica's shard, on every rank
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

// Ranks that disagree (different sample counts, a bad label on one rank) all
// get an error from the collective step, none waits forever, and the trainer
// stays usable.
TEST(CApi, RanksThatDisagreeAllFailAndTheTrainerStaysUsable) {
  const int R = test::world_size(), rank = test::world_rank();
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  Batch b = batch(3);
  if (R > 1) {
    const int64_t n = rank == 0 ? 6 : 8;
    EXPECT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), n, nullptr), GPIPE_ERROR_INPUT);
    EXPECT_EQ(std::string(gpipe_last_error()),
              "step: the ranks passed different sample counts (n = " + std::to_string(n) + " on rank " +
                  std::to_string(rank) + "; 6 to 8 across ranks): every rank must pass the same batch");
    std::vector<float> logits(8 * 4);
    EXPECT_EQ(gpipe_predict(t, b.inputs.data(), rank == 0 ? 7 : 8, logits.data()), GPIPE_ERROR_INPUT);
  }
  // A label out of range on the last rank only.
  Batch bad = b;
  if (rank == R - 1) bad.labels[5] = 9;
  EXPECT_EQ(gpipe_train_step(t, bad.inputs.data(), bad.labels.data(), 8, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_EQ(std::string(gpipe_last_error()),
            std::string(rank == R - 1 ? "" : "gpipe_train_step: rank " + std::to_string(R - 1) +
                                                 " rejected its arguments: ") +
                "gpipe_train_step: labels[5] = 9 is outside [0, 4)");
  // n out of range on rank 0 only.
  EXPECT_EQ(gpipe_train_step(t, b.inputs.data(), b.labels.data(), rank == 0 ? 9 : 8, nullptr), GPIPE_ERROR_INPUT);
  expect_usable_then_destroy(t, b);
}

// A NULL or invalid argument on one rank only: every collective entry point
// agrees on its arguments before communicating, so every rank returns the
// same status (the lowest failing rank's), none waits in a collective the
// failing rank never enters, and the trainer stays usable.
TEST(CApi, AnArgumentRejectedOnOneRankFailsEveryRankWithTheSameStatus) {
  const int R = test::world_size(), rank = test::world_rank();
  const bool last = rank == R - 1;
  const std::string last_rank = std::to_string(R - 1);
  const auto others = [&](const std::string& function, const std::string& message) {
    return last ? message : function + ": rank " + last_rank + " rejected its arguments: " + message;
  };
  // create: a NULL deck on the last rank, then a deck that does not parse there.
  gpipe_trainer* t = nullptr;
  EXPECT_EQ(gpipe_create_from_string(last ? nullptr : kDeck.c_str(), MPI_COMM_WORLD, &t),
            GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(std::string(gpipe_last_error()),
            others("gpipe_create_from_string", "gpipe_create_from_string: deck_yaml and out must not be NULL"));
  EXPECT_EQ(gpipe_create_from_string(last ? "model: [" : kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_ERROR_INPUT);
  EXPECT_EQ(t, nullptr);
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  Batch b = batch(4);
  // train_step: NULL labels on the last rank.
  EXPECT_EQ(gpipe_train_step(t, b.inputs.data(), last ? nullptr : b.labels.data(), 8, nullptr),
            GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_EQ(std::string(gpipe_last_error()),
            others("gpipe_train_step", "gpipe_train_step: trainer, inputs and labels must not be NULL"));
  // predict: NULL output on the last rank.
  std::vector<float> logits(8 * 4);
  EXPECT_EQ(gpipe_predict(t, b.inputs.data(), 8, last ? nullptr : logits.data()), GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_EQ(std::string(gpipe_last_error()),
            others("gpipe_predict", "gpipe_predict: trainer, inputs and logits must not be NULL"));
  // get_parameters: a wrong count on the last rank (the gather would hang).
  std::int64_t count = 0;
  ASSERT_EQ(gpipe_parameter_count(t, &count), GPIPE_OK);
  std::vector<double> values(size_t(count) + 1);
  EXPECT_EQ(gpipe_get_parameters(t, values.data(), last ? count + 1 : count), GPIPE_ERROR_INPUT);
  // save_checkpoint: a NULL path on the last rank.
  EXPECT_EQ(gpipe_save_checkpoint(t, last ? nullptr : "unused.h5"), GPIPE_ERROR_NULL_ARGUMENT);
  EXPECT_EQ(std::string(gpipe_last_error()),
            others("gpipe_save_checkpoint", "gpipe_save_checkpoint: trainer and path must not be NULL"));
  EXPECT_FALSE(std::filesystem::exists("unused.h5"));
  // Two failures: the lowest failing rank's status wins on every rank.
  if (R > 1)
    EXPECT_EQ(gpipe_train_step(t, rank == 0 ? nullptr : b.inputs.data(), b.labels.data(), last ? 9 : 8, nullptr),
              GPIPE_ERROR_NULL_ARGUMENT);
  expect_usable_then_destroy(t, b);
}

// Decks that differ across ranks: before, the last rank (with a checkpoint
// directory the others lack) entered the directory check's collectives while
// the others built the pipeline: a hang; another learning rate trained on
// mixed hyper-parameters. Now every rank fails with the first difference.
TEST(CApi, DecksThatDifferAcrossRanksFailEveryRank) {
  const int R = test::world_size(), rank = test::world_rank();
  if (R == 1) GTEST_SKIP() << "one rank passes one deck";
  const bool last = rank == R - 1;
  const std::string who = std::to_string(R - 1);
  gpipe_trainer* t = nullptr;
  const std::string dir = kDeck + "checkpoint: {directory: " + ::testing::TempDir() + "}\n";
  EXPECT_EQ(gpipe_create_from_string(last ? dir.c_str() : kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_ERROR_INPUT);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(std::string(gpipe_last_error()),
            "<deck string>: rank " + who + " read another deck than rank 0 (<deck string>): first difference in "
            "section checkpoint: rank " + who + " has 'checkpoint: {directory: " + ::testing::TempDir() +
                "}', rank 0 has '(end of the deck)' (the deck as "
            "parsed, after --set); every rank must read the same deck with the same --set options");
  std::string lr = kDeck;
  lr.replace(lr.find("lr: 0.01"), 8, "lr: 0.02");
  EXPECT_EQ(gpipe_create_from_string(last ? lr.c_str() : kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_ERROR_INPUT);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(std::string(gpipe_last_error()),
            "<deck string>: rank " + who + " read another deck than rank 0 (<deck string>): first difference in "
            "section optimizer: rank " + who + " has 'optimizer: {type: adamw, lr: 0.02, weight_decay: 0.01}', rank 0 "
            "has 'optimizer: {type: adamw, lr: 0.01, weight_decay: 0.01}' (the deck as parsed, after --set); every "
            "rank must read the same deck with the same --set options");
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

// A deck without a data section (the caller passes the data): accepted by
// both constructors, and it trains bitwise as the same deck with one.
TEST(CApi, DeckWithoutDataSection) {
  std::string no_data = kDeck;
  const auto at = no_data.find("\ndata: ");
  ASSERT_NE(at, std::string::npos);
  no_data.erase(at, no_data.find('\n', at + 1) - at);
  ASSERT_EQ(no_data.find("data:"), std::string::npos) << no_data;
  gpipe_trainer *with = nullptr, *without = nullptr, *from_file = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &with), GPIPE_OK) << gpipe_last_error();
  ASSERT_EQ(gpipe_create_from_string(no_data.c_str(), MPI_COMM_WORLD, &without), GPIPE_OK)
      << gpipe_last_error();
  const std::string path = ::testing::TempDir() + "gpipe_capi_no_data_" +
                           std::to_string(test::world_size()) + "_" + std::to_string(test::world_rank()) +
                           ".yaml";
  { std::ofstream(path) << no_data; }
  ASSERT_EQ(gpipe_create_from_file(path.c_str(), MPI_COMM_WORLD, &from_file), GPIPE_OK) << gpipe_last_error();
  for (std::uint64_t s = 0; s < 2; ++s) {
    const Batch x = batch(60 + s);
    double a = -1, b = -2, c = -3;
    ASSERT_EQ(gpipe_train_step(with, x.inputs.data(), x.labels.data(), 8, &a), GPIPE_OK) << gpipe_last_error();
    ASSERT_EQ(gpipe_train_step(without, x.inputs.data(), x.labels.data(), 8, &b), GPIPE_OK) << gpipe_last_error();
    ASSERT_EQ(gpipe_train_step(from_file, x.inputs.data(), x.labels.data(), 8, &c), GPIPE_OK) << gpipe_last_error();
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
  }
  // A data section that is there is still checked.
  gpipe_trainer* bad = nullptr;
  const std::string bad_data = no_data + "data: {format: idx}\n";
  EXPECT_EQ(gpipe_create_from_string(bad_data.c_str(), MPI_COMM_WORLD, &bad), GPIPE_ERROR_INPUT);
  EXPECT_EQ(bad, nullptr);
  for (auto* t : {with, without, from_file}) EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
  std::filesystem::remove(path);
}

// Every rank of a pipeline must pass the same batch: a rank passing other
// inputs (here the odd ranks) or other labels (the last rank) fails the step
// on every rank with one message naming those ranks; nothing is trained.
TEST(CApi, RanksPassingDifferentBatchesFailNamingThem) {
  const int R = test::world_size(), me = test::world_rank();
  if (R < 2) GTEST_SKIP() << "needs 2 or more ranks";
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(kDeck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  int64_t count = 0;
  ASSERT_EQ(gpipe_parameter_count(t, &count), GPIPE_OK);
  std::vector<double> before(static_cast<size_t>(count)), after(before.size());
  ASSERT_EQ(gpipe_get_parameters(t, before.data(), count), GPIPE_OK);

  Batch x = batch(70);
  if (me % 2 == 1) x.inputs[13] += 1.0f;  // one value of one sample, as a differently seeded rank
  EXPECT_EQ(gpipe_train_step(t, x.inputs.data(), x.labels.data(), 8, nullptr), GPIPE_ERROR_INPUT);
  std::string odd;
  for (int r = 1; r < R; r += 2) odd += (odd.empty() ? "" : ", ") + std::to_string(r);
  const std::string head = "gpipe_train_step: every rank must pass the same batch (the same n samples), but";
  const std::string tail = " (checksums compared over the trainer's communicator)";
  EXPECT_EQ(std::string(gpipe_last_error()),
            head + " the inputs of rank" + (R > 3 ? "s " : " ") + odd + " differ from rank 0's" + tail);

  Batch y = batch(71);
  if (me == R - 1) y.labels[7] = (y.labels[7] + 1) % 4;
  EXPECT_EQ(gpipe_train_step(t, y.inputs.data(), y.labels.data(), 8, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_EQ(std::string(gpipe_last_error()),
            head + " the labels of rank " + std::to_string(R - 1) + " differ from rank 0's" + tail);

  // Both at once, with targets: a regression deck.
  std::string mse = test::deck_text(  // 5 layers: up to 4 ranks (cells)
      "[{type: dense, units: 6}, {type: tanh}, {type: dense, units: 6}, {type: tanh}, {type: dense, units: 2}]",
      5, 8, 2, "double", "{}", "{type: adam, lr: 0.01}");
  mse.replace(mse.find("\n  layers:"), 0, "\n  loss: mse");
  gpipe_trainer* r = nullptr;
  ASSERT_EQ(gpipe_create_from_string(mse.c_str(), MPI_COMM_WORLD, &r), GPIPE_OK) << gpipe_last_error();
  std::vector<float> targets(16, 0.5f);
  if (me == 1) {
    x.inputs[0] += 1.0f;
    targets[3] = -0.5f;
  }
  EXPECT_EQ(gpipe_train_step_targets(r, x.inputs.data(), targets.data(), 8, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_EQ(std::string(gpipe_last_error()),
            "gpipe_train_step_targets: every rank must pass the same batch (the same n samples), but the "
            "inputs of rank" + std::string(R > 3 ? "s " : " ") + odd + " differ from rank 0's; the targets "
            "of rank 1 differ from rank 0's" + tail);
  EXPECT_EQ(gpipe_destroy(r), GPIPE_OK);

  ASSERT_EQ(gpipe_get_parameters(t, after.data(), count), GPIPE_OK);
  EXPECT_EQ(after, before);  // no step was applied
  // The same batch everywhere trains again.
  const Batch z = batch(72);
  EXPECT_EQ(gpipe_train_step(t, z.inputs.data(), z.labels.data(), 8, nullptr), GPIPE_OK) << gpipe_last_error();
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

// A language model through the C API: labels are one per token (n x T) in
// [0, vocabulary); a step equals the C++ API's bitwise, a label outside
// the vocabulary is named by sample and token, and every token label (not
// only the first n) is in the batch checksum.
TEST(CApi, TokenModelsTakeOneLabelPerTokenInTheVocabulary) {
  const std::string deck =
      "seed: 3\nprecision: double\nmodel:\n  input: 4\n  loss: token_cross_entropy\n  layers: "
      "[{type: token_embedding, vocabulary: 5, width: 4}, {type: pos_embed}, "
      "{type: transformer_block, heads: 2, causal: true}, {type: lm_head, vocabulary: 5}]\n"
      "data: {format: tokens, train_file: a.h5, test_file: b.h5}\n"
      "training: {epochs: 1, batch_size: 4, micro_batches: 2}\noptimizer: {type: adam, lr: 0.01}\n";
  const std::int64_t n = 4, T = 4;
  std::vector<float> inputs;
  std::vector<std::int32_t> labels;
  for (std::int64_t k = 0; k < n * T; ++k) {
    inputs.push_back(float(k % 5));
    labels.push_back(std::int32_t((k + 1) % 5));
  }
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(deck.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  auto bad = labels;
  bad[size_t(2 * T + 3)] = 5;  // sample 2, token 3: outside the vocabulary of 5
  EXPECT_EQ(gpipe_train_step(t, inputs.data(), bad.data(), n, nullptr), GPIPE_ERROR_INPUT);
  EXPECT_STREQ(gpipe_last_error(),
               "gpipe_train_step: labels[11] = 5 (sample 2, token 3) is outside [0, 5) (the vocabulary)");
  if (test::world_size() > 1) {
    auto other = labels;
    if (test::world_rank() == test::world_size() - 1) other[size_t(n * T - 1)] = 0;  // beyond the first n
    EXPECT_EQ(gpipe_train_step(t, inputs.data(), other.data(), n, nullptr), GPIPE_ERROR_INPUT);
    EXPECT_NE(std::string(gpipe_last_error()).find("the labels of rank " + std::to_string(test::world_size() - 1) +
                                                   " differ from rank 0's"),
              std::string::npos)
        << gpipe_last_error();
  }
  double loss = -1;
  ASSERT_EQ(gpipe_train_step(t, inputs.data(), labels.data(), n, &loss), GPIPE_OK) << gpipe_last_error();
  Pipeline<double> cpp(parse_deck(deck, "capi"), MPI_COMM_WORLD);
  const double expected = cpp.from_last(cpp.step(inputs.data(), labels.data(), n).loss) / double(n);
  EXPECT_EQ(loss, expected);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
}

}  // namespace
}  // namespace gpipe

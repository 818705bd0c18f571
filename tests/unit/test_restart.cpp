// Where a restart resumes: by samples seen, or an error naming the deck keys
// whose change makes a mid-epoch position meaningless.

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/train/restart.hpp"

namespace gpipe {
namespace {

Deck deck(const std::vector<std::string>& sets = {}) {
  return parse_deck(test::deck_text("[{type: dense, units: 3}]", 4, 16, 2), "d.yaml", sets);
}

CheckpointInfo written_by(const Deck& d, std::int64_t epoch, std::int64_t epoch_samples) {
  CheckpointInfo info;
  info.step = 8;
  info.epoch = epoch;
  info.deck = d.text;
  info.batch_size = d.training.batch_size;
  info.train_samples = 256;
  info.epoch_samples = epoch_samples;
  info.epoch_loss_sum = 12.5;
  info.epoch_loss_samples = epoch_samples;
  return info;
}

std::string error_of(const CheckpointInfo& info, const Deck& d, std::int64_t samples = 256) {
  try {
    restart_position(info, "ckpt.h5", d, samples);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Restart, AnotherBatchSizeResumesAtTheSameSample) {
  // The case: step 8 of batch 16 = sample 128 of epoch 0; batch 32 resumes there.
  const DataPosition p =
      restart_position(written_by(deck(), 0, 128), "ckpt.h5", deck({"training.batch_size=32"}), 256);
  EXPECT_EQ(p.epoch, 0);
  EXPECT_EQ(p.epoch_samples, 128);
  EXPECT_EQ(p.epoch_loss_sum, 12.5);
  EXPECT_EQ(p.loss_samples, 128);
  EXPECT_EQ(steps_in_epoch(256, 128, 32, 2), 4);
  EXPECT_EQ(steps_in_epoch(250, 128, 32, 2), 4);  // 122 left: 3 full + 26 >= M
  EXPECT_EQ(steps_in_epoch(257, 128, 32, 2), 4);  // 129 left: the last 1 < M is dropped
}

TEST(Restart, AnotherTrainingSetStopsMidEpochNamingTheKeys) {
  EXPECT_EQ(error_of(written_by(deck(), 0, 128), deck({"data.train_limit=200", "seed=9"}), 200),
            "ckpt.h5: cannot resume in the middle of epoch 1 (128 of its samples trained): the deck "
            "changed data.train_limit, seed since the checkpoint was written, so the position in "
            "the epoch's data no longer applies; restore the previous values or restart from an "
            "end-of-epoch checkpoint");
  EXPECT_EQ(error_of(written_by(deck(), 1, 16), deck(), 300),
            "ckpt.h5: cannot resume in the middle of epoch 2 (16 of its samples trained): the deck "
            "changed the training set (256 samples, now 300) since the checkpoint was written, so "
            "the position in the epoch's data no longer applies; restore the previous values or "
            "restart from an end-of-epoch checkpoint");
  // At an epoch boundary the change is allowed, and reported.
  std::vector<std::string> changed;
  const DataPosition p =
      restart_position(written_by(deck(), 2, 0), "ckpt.h5", deck({"data.train_images=x"}), 256, &changed);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(changed, (std::vector<std::string>{"data.train_images"}));
}

TEST(Restart, OlderCheckpointsResumeByStepsOfTheirOwnBatchSize) {
  CheckpointInfo info = written_by(deck(), 0, 0);
  info.batch_size = 0;  // written before the position was recorded
  info.epoch_loss_samples = -1;
  const DataPosition p = restart_position(info, "ckpt.h5", deck({"training.batch_size=32"}), 256);
  EXPECT_EQ(p.epoch_samples, 8 * 16);  // 8 steps of the checkpoint deck's 16
  EXPECT_EQ(p.loss_samples, 0);        // its loss so far is unknown: reported as partial
}

}  // namespace
}  // namespace gpipe

// Every rank checks (and creates) the checkpoint directory at once
// (require_writable_directory): a check racing another's creation must not
// call the new directory "not a directory" (seen at 3-4 ranks under ASan).
// Threads stand in for ranks; every call must find the directory writable.
TEST(CheckpointDirectoryCheck, ConcurrentCreationIsNotAnError) {
  namespace fs = std::filesystem;
  const std::string root = ::testing::TempDir() + "gpipe_concurrent_ckpt_dirs";
  fs::remove_all(root);
  for (int round = 0; round < 200; ++round) {
    const std::string dir = root + "/" + std::to_string(round) + "/checkpoints";
    std::vector<std::string> errors(16);
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    for (size_t t = 0; t < errors.size(); ++t)
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < int(errors.size())) std::this_thread::yield();  // start together
        errors[t] = gpipe::unwritable_directory("checkpoint.directory", dir);
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) ASSERT_EQ(e, "") << "round " << round;
    EXPECT_TRUE(fs::is_directory(dir));
  }
  fs::remove_all(root);
}

// Issue 25's failure classes that need a pipeline (ctest runs this at 1-4
// ranks): an I/O failure during a checkpoint write (a file-size limit, a full
// file system), a seed stored as given, learning-rate schedules continued by
// training progress across another batch size and layout, and the last
// partial batch that a layout cannot train, said and counted.

#include <gtest/gtest.h>
#include <mpi.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/gpipe.h"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/optim/optimizer.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"
#include "gpipe/train/restart.hpp"

namespace gpipe {
namespace {

namespace fs = std::filesystem;
using test::world_rank;
using test::world_size;

constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 15;

std::string shared_dir(const std::string& name) { return test::shared_dir("rel", name); }

const Dataset& data() {
  static const Dataset d = test::synthetic(kBatch * 3, kInput, 3, 5);
  return d;
}

Deck deck(const std::string& optimizer = "{type: adam, lr: 0.01}") {
  return parse_deck(test::deck_text(test::kNineLayers, kInput, kBatch, 4, "double", "{}", optimizer), "d");
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A soft RLIMIT_FSIZE for the scope (SIGXFSZ ignored, so a write past it
// fails with EFBIG instead of killing the rank).
struct FileSizeLimit {
  rlimit saved{};
  void (*handler)(int) = nullptr;
  explicit FileSizeLimit(std::uint64_t bytes) {
    handler = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved);
    rlimit limit = saved;
    limit.rlim_cur = rlim_t(bytes);
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, handler);
  }
};

// The checkpoint's data bytes: parameters and Adam's two moments.
std::uint64_t data_bytes(const Pipeline<double>& t) {
  return std::uint64_t(t.total_parameters()) * 3 * sizeof(double);
}

std::string save_error(Pipeline<double>& t, const std::string& path) {
  try {
    t.save_checkpoint(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// Class 5: a file-size limit below what the checkpoint needs is found before
// HDF5 creates anything; one that HDF5 hits during the write (the data fits,
// the metadata does not) leaves every HDF5 object closed, the earlier
// checkpoint intact, no .tmp, and a pipeline that saves again once the limit
// is lifted. (A failed close would crash this binary in MPI_Finalize.)
TEST(CheckpointWriteFailure, FileSizeLimitBeforeAndDuringTheWrite) {
  const std::string dir = shared_dir("fsize");
  Pipeline<double> t(deck(), MPI_COMM_WORLD);
  const auto order = epoch_order(data().samples, 7, 0, true);
  t.step(data(), order, 0, kBatch);
  const std::string good = checkpoint_path(dir, 1, t.run_id());
  t.save_checkpoint(good);
  const std::string before = read_bytes(good);
  const std::uint64_t bytes = data_bytes(t);

  const std::string early = checkpoint_path(dir, 2, t.run_id());
  {
    const FileSizeLimit limit(4096);
    EXPECT_EQ(save_error(t, early),
              early + ".tmp: not written: the checkpoint needs at least " + std::to_string(bytes) +
                  " bytes, more than rank 0's file size limit of 4096 bytes (ulimit -f)");
  }
  std::string during;
  {
    const FileSizeLimit limit(bytes + 1);  // passes the check; the file's metadata does not fit
    during = save_error(t, early);
  }
  EXPECT_EQ(during.rfind(early + ".tmp: ", 0), 0u) << during;
  EXPECT_NE(during.find(": HDF5: "), std::string::npos) << during;  // HDF5's own reason
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(early));
  EXPECT_FALSE(fs::exists(early + ".tmp"));
  EXPECT_EQ(read_bytes(good), before);  // the earlier checkpoint intact
  // Still usable: the next save succeeds and reads back as written.
  t.save_checkpoint(early);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(fs::exists(early));
  EXPECT_EQ(read_checkpoint_info(early).step, 1);
}

// Class 5, another instance: a full file system (a 64 KiB tmpfs where the
// machine allows mounting): the free space is checked before HDF5 starts.
TEST(CheckpointWriteFailure, FullFileSystem) {
  const std::string dir = shared_dir("full");
  int mounted = 0;
  if (world_rank() == 0) mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0 ? 1 : 0;
  MPI_Bcast(&mounted, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!mounted) GTEST_SKIP() << "mounting a tmpfs is not permitted here";
  struct Unmount {
    std::string dir;
    ~Unmount() {
      MPI_Barrier(MPI_COMM_WORLD);
      if (world_rank() == 0) EXPECT_EQ(::umount(dir.c_str()), 0);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  } unmount{dir};
  Deck d = parse_deck(test::deck_text("[{type: dense, units: 64}, {type: relu}, {type: dense, units: 64}, "
                                      "{type: relu}, {type: dense, units: 3}]",
                                      kInput, kBatch, 1, "double"),
                      "d");
  {
    Pipeline<double> t(d, MPI_COMM_WORLD);
    const std::string path = checkpoint_path(dir, 0, t.run_id());
    struct statvfs s {};
    ASSERT_EQ(::statvfs(dir.c_str(), &s), 0);
    const std::uint64_t free = std::uint64_t(s.f_bavail) * s.f_frsize;
    EXPECT_EQ(save_error(t, path), path + ".tmp: not written: the checkpoint needs at least " +
                                       std::to_string(data_bytes(t)) + " bytes, but the file system of " +
                                       dir + " has " + std::to_string(free) + " bytes free");
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
}

// Class 5 through the C API: an error code, the message, and a trainer that
// still saves afterwards.
TEST(CheckpointWriteFailure, CApiReturnsAnErrorAndStaysUsable) {
  const std::string dir = shared_dir("capi");
  const std::string text = test::deck_text(test::kNineLayers, kInput, kBatch, 4, "double");
  gpipe_trainer* t = nullptr;
  ASSERT_EQ(gpipe_create_from_string(text.c_str(), MPI_COMM_WORLD, &t), GPIPE_OK) << gpipe_last_error();
  const std::string path = dir + "/c.h5";
  {
    const FileSizeLimit limit(4096);
    EXPECT_EQ(gpipe_save_checkpoint(t, path.c_str()), GPIPE_ERROR_INPUT);
    EXPECT_NE(std::string(gpipe_last_error()).find("not written: the checkpoint needs at least"),
              std::string::npos)
        << gpipe_last_error();
  }
  EXPECT_EQ(gpipe_save_checkpoint(t, path.c_str()), GPIPE_OK) << gpipe_last_error();
  EXPECT_EQ(gpipe_destroy(t), GPIPE_OK);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(fs::exists(path));
}

// Class 6: a seed is stored as given (2^64 - 1, not -1).
TEST(CheckpointValues, SeedStoredAsGiven) {
  const std::string dir = shared_dir("seed");
  Deck d = deck();
  d.seed = 18446744073709551615ull;
  Pipeline<double> t(d, MPI_COMM_WORLD);
  const std::string path = checkpoint_path(dir, 0, t.run_id());
  t.save_checkpoint(path);
  EXPECT_EQ(read_checkpoint_info(path).seed, 18446744073709551615ull);
}

// Class 2: the schedule is a function of the samples trained, so a restart
// with another batch size continues the curve (the reported instance: a
// cosine run restarted at a third of its first epoch with batch size 15 -> 5).
TEST(Schedule, CosineContinuesAcrossAnotherBatchSize) {
  const std::string dir = shared_dir("cosine");
  Deck d = deck("{type: sgd, lr: 0.1, schedule: cosine}");
  d.training.epochs = 2;
  d.training.progress_every = 0;
  std::string first;
  {
    Pipeline<double> t(d, MPI_COMM_WORLD);
    t.set_total_steps(6);  // the first run steps itself: a horizon in steps (2 epochs of 3)
    t.step(data(), epoch_order(data().samples, d.seed, 0, true), 0, kBatch);
    t.set_position({0, kBatch, 0.0, kBatch});
    first = checkpoint_path(dir, 1, t.run_id());
    t.save_checkpoint(first);
  }
  Deck five = d;
  five.training.batch_size = 5;
  five.checkpoint.directory = dir;  // the stop's checkpoint
  Pipeline<double> t(five, MPI_COMM_WORLD);
  const CheckpointInfo info = t.load_checkpoint(first);
  t.set_position(restart_position(info, first, five, data().samples));
  Driver<double> driver(t, nullptr);
  driver.set_stop([] { return true; });  // one step, then a checkpoint and stop
  driver.fit(data(), data());
  const double total = 2.0 * double(data().samples);  // 90 samples in the run
  EXPECT_EQ(t.total_samples(), 90);
  // The step after the restart starts at sample 15 of 90, whatever the batch size.
  EXPECT_EQ(t.last_learning_rate(), learning_rate(five.optimizer, 15, 90));
  EXPECT_NEAR(t.last_learning_rate(), 0.1 * 0.5 * (1 + std::cos(M_PI * 15.0 / total)), 1e-15);
  EXPECT_EQ(t.samples_done(), 20);
}

// Classes 2, 3 and 8 together: at D = 2 a last partial batch smaller than
// D x M is not trained (the driver says which samples and why, and the
// counts are the trained ones), and the logged learning rate at a given
// sample is the same as on one replica, where that batch is trained.
TEST(PartialBatch, UntrainedTailIsSaidAndCounted) {
  Deck d = parse_deck(test::deck_text("[{type: dense, units: 4}, {type: relu}, {type: dense, units: 3}]",
                                      kInput, 20, 3, "double", "{}",
                                      "{type: sgd, lr: 0.1, schedule: cosine}"),
                      "d");
  d.training.progress_every = 0;
  d.parallel.cells = 1;  // D = ranks replicas of one cell
  const int D = world_size();
  std::ostringstream said;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(said);
  auto saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  Pipeline<double> t(d, MPI_COMM_WORLD);
  const auto reports = fit(t, data(), data(), nullptr);
  spdlog::set_default_logger(saved);
  // 45 samples in batches of 20: a tail of 5, trained when 5 >= D x 3.
  const std::int64_t untrained = 5 >= D * 3 ? 0 : 5;
  EXPECT_EQ(t.untrained_per_epoch(45), untrained);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].train_samples, 45 - untrained);
  EXPECT_EQ(t.steps_done(), untrained ? 2 : 3);
  if (world_rank() == 0 && untrained) {
    EXPECT_NE(said.str().find(fmt::format(
                  "synthetic: the last 5 of every epoch's 45 samples (positions 40-44 of the epoch's "
                  "sample order) are not trained: a step needs at least D x M = {} samples (D = {} "
                  "replicas x M = 3 micro-batches) and the last batch has 5; 40 samples per epoch "
                  "are trained",
                  3 * D, D)),
              std::string::npos)
        << said.str();
  }
  if (!untrained) EXPECT_EQ(said.str().find("not trained"), std::string::npos) << said.str();
  // The rate of the last step taken (at sample 20 of 45 when the tail is not
  // trained, at 40 when it is): a function of the samples, not the steps.
  EXPECT_EQ(t.last_learning_rate(), learning_rate(d.optimizer, untrained ? 20 : 40, 45));
}

}  // namespace
}  // namespace gpipe

// Checkpoints and restart (ctest runs this at 1, 2, 3 and 4 ranks): restart
// is bitwise invisible with the same and with a different number of cells;
// damaged or mismatched checkpoints give exact errors and change nothing;
// traces are consistent.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

namespace fs = std::filesystem;

const std::string kLayers = test::kNineLayers;
constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 15;
using test::world_rank;
using test::world_size;


// A directory shared by all ranks, fresh for each test.
std::string shared_dir(const std::string& name) { return test::shared_dir("ckpt", name); }

const Dataset& data() {
  static const Dataset d = test::synthetic(kBatch * 3, kInput, 3, 5);
  return d;
}

Deck deck(const std::string& layers = kLayers) {
  return parse_deck(test::deck_text(layers, kInput, kBatch, 4, "double", "{remat: always}"), "d");
}

// Runs steps [from, to) of the fixed data schedule.
void run(Pipeline<double>& t, std::int64_t from, std::int64_t to) {
  for (std::int64_t s = from; s < to; ++s) {
    ASSERT_EQ(t.steps_done(), s);
    const auto order = epoch_order(data().samples, 7, s / 3, true);
    t.step(data(), order, (s % 3) * kBatch, kBatch);
  }
}

LatestCheckpoint latest(const std::string& dir, const Deck& d = deck()) {
  return find_latest_checkpoint(dir, d.model, d.precision, d.optimizer.type, MPI_COMM_WORLD);
}

std::vector<double> uninterrupted(MPI_Comm comm, int steps) {
  Pipeline<double> t(deck(), comm);
  run(t, 0, steps);
  return t.gather_parameters();
}

TEST(Restart, SameCellsBitwise) {
  const std::string dir = shared_dir("same");
  const auto reference = uninterrupted(MPI_COMM_WORLD, 6);
  {
    Pipeline<double> first(deck(), MPI_COMM_WORLD);
    run(first, 0, 3);
    first.save_checkpoint(checkpoint_path(dir, 3));
  }
  Pipeline<double> second(deck(), MPI_COMM_WORLD);
  const CheckpointInfo info = second.load_checkpoint(latest(dir).path);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(info.optimizer_steps, 3);
  run(second, 3, 6);
  const auto restarted = second.gather_parameters();
  if (world_rank() == 0) EXPECT_EQ(restarted, reference);
}

TEST(Restart, DifferentCellsBitwise) {
  const std::string dir = shared_dir("different");
  std::vector<double> reference;
  if (world_rank() == 0) reference = uninterrupted(MPI_COMM_SELF, 6);
  // K cells write, one cell restarts.
  {
    Pipeline<double> k(deck(), MPI_COMM_WORLD);
    run(k, 0, 3);
    k.save_checkpoint(checkpoint_path(dir, 3));
  }
  if (world_rank() == 0) {
    Pipeline<double> one(deck(), MPI_COMM_SELF);
    one.load_checkpoint(checkpoint_path(dir, 3));
    run(one, 3, 6);
    EXPECT_EQ(one.gather_parameters(), reference);
  }
  // One cell writes, K cells restart.
  if (world_rank() == 0) {
    Pipeline<double> one(deck(), MPI_COMM_SELF);
    run(one, 0, 2);
    one.save_checkpoint(checkpoint_path(dir, 2));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Pipeline<double> k(deck(), MPI_COMM_WORLD);
  k.load_checkpoint(checkpoint_path(dir, 2));
  run(k, 2, 6);
  const auto restarted = k.gather_parameters();
  if (world_rank() == 0) EXPECT_EQ(restarted, reference);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The error every rank gets when loading `path` into a trainer of `d`.
std::string load_error(const Deck& d, const std::string& path) {
  Pipeline<double> t(d, MPI_COMM_WORLD);
  try {
    t.load_checkpoint(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// Rank 0 edits the checkpoint at `path` with raw HDF5 calls.
template <class F>
void edit(const std::string& path, F&& change) {
  if (world_rank() == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    change(f);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CheckpointErrors, ExactMessagesAndNothingOverwritten) {
  const std::string dir = shared_dir("errors");
  const std::string good = checkpoint_path(dir, 1);
  {
    Pipeline<double> t(deck(), MPI_COMM_WORLD);
    run(t, 0, 1);
    t.save_checkpoint(good);
  }
  EXPECT_FALSE(fs::exists(good + ".tmp"));
  const std::string before = read_bytes(good);
  const int K = world_size();
  const std::string another = dir + "/copy.h5";
  auto copy = [&](const std::string& to) {
    if (world_rank() == 0) fs::copy_file(good, to, fs::copy_options::overwrite_existing);
    MPI_Barrier(MPI_COMM_WORLD);
  };

  // Truncated.
  const std::string truncated = dir + "/truncated.h5";
  copy(truncated);
  if (world_rank() == 0) fs::resize_file(truncated, fs::file_size(truncated) / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string t_error = load_error(deck(), truncated);
  EXPECT_TRUE(t_error == truncated + ": not a readable HDF5 checkpoint (corrupt or truncated)" ||
              t_error.find(": reading /layers/") != std::string::npos ||
              t_error == truncated + ": another rank failed to read its layers")
      << t_error;

  // Not HDF5 at all.
  const std::string garbage = dir + "/garbage.h5";
  if (world_rank() == 0) std::ofstream(garbage) << "not a checkpoint";
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(load_error(deck(), garbage), garbage + ": not a readable HDF5 checkpoint (corrupt or truncated)");
  EXPECT_EQ(load_error(deck(), dir + "/none.h5"), dir + "/none.h5: checkpoint not found");

  // Unknown format version.
  copy(another);
  edit(another, [](hid_t f) {
    const long long v = 99;
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &v);
    H5Aclose(a);
  });
  EXPECT_EQ(load_error(deck(), another),
            another + ": format_version 99 is not supported (this build reads 1)");

  // A different model: one layer fewer; a different layer type; another shape.
  EXPECT_EQ(load_error(deck("[{type: dense, units: 10}, {type: gelu}, {type: layer_norm}, "
                            "{type: dense, units: 8}, {type: tanh}, {type: dense, units: 5}, "
                            "{type: relu}, {type: dense, units: 3}]"),
                       good),
            good + ": the checkpoint has 9 layers, the model has 8");
  const std::string relu = "[{type: dense, units: 10}, {type: relu}, {type: layer_norm}, {type: dropout, "
                           "rate: 0.2}, {type: dense, units: 8}, {type: tanh}, {type: dense, units: 5}, "
                           "{type: relu}, {type: dense, units: 3}]";
  const std::string type_error = load_error(deck(relu), good);
  EXPECT_TRUE(type_error == good + ": missing group /layers/001_relu (the model's layer 1 is a relu layer)" ||
              (K > 1 && type_error == good + ": another rank failed to read its layers"))
      << type_error;
  const std::string wide = "[{type: dense, units: 10}, {type: gelu}, {type: layer_norm}, {type: dropout, "
                           "rate: 0.2}, {type: dense, units: 9}, {type: tanh}, {type: dense, units: 5}, "
                           "{type: relu}, {type: dense, units: 3}]";
  const std::string shape_error = load_error(deck(wide), good);
  // Widening layer 4 changes the weights of layers 4 and 6; the rank holding each reports it.
  EXPECT_TRUE(shape_error == good + ": /layers/004_dense/weight has shape 10x8, the model expects 10x9" ||
              (K > 1 && shape_error == good + ": /layers/006_dense/weight has shape 8x5, the model expects 9x5") ||
              (K > 1 && shape_error == good + ": another rank failed to read its layers"))
      << shape_error;

  // Another optimizer's state.
  Deck sgd = deck();
  sgd.optimizer.type = "sgd";
  EXPECT_EQ(load_error(sgd, good), good + ": optimizer: the checkpoint holds adam state, the deck asks for sgd");

  // Nothing was written to the good checkpoint by any failed load.
  if (world_rank() == 0) EXPECT_EQ(read_bytes(good), before);
}

// Runs sharing a directory: pruning removes only the same run's older files,
// never the newest, never another run's or an unnamed (older version's) file.
TEST(Checkpoint, PruneOnlyTheSameRunsOlderFiles) {
  const std::string dir = shared_dir("prune");
  const std::string a = "00000000000000aa", b = "00000000000000bb";
  if (world_rank() == 0) {
    for (int s : {5, 10, 15}) std::ofstream(checkpoint_path(dir, s, a)) << s;
    for (int s : {40, 80}) std::ofstream(checkpoint_path(dir, s, b)) << s;  // an older run, further on
    std::ofstream(checkpoint_path(dir, 90)) << "an older version's file";
    std::ofstream(checkpoint_path(dir, 20, a) + ".tmp") << "partial";
    prune_checkpoints(dir, a, 2);
    EXPECT_FALSE(fs::exists(checkpoint_path(dir, 5, a)));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 10, a)));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 15, a)));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 40, b)));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 80, b)));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 90)));
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 20, a) + ".tmp"));
    prune_checkpoints(dir, a, 0);  // keep < 1 still keeps the newest
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 15, a)));
    EXPECT_FALSE(fs::exists(checkpoint_path(dir, 10, a)));
    EXPECT_EQ(checkpoint_path(dir, 15, a), dir + "/ckpt_000000015_" + a + ".h5");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  try {
    latest(dir + "/empty");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/empty: no complete checkpoint (ckpt_*.h5) to restart from");
  }
}

// `latest` = the newest complete, readable checkpoint of a compatible run;
// damaged and incompatible newer ones are skipped and named. The same on every rank.
TEST(Checkpoint, LatestSkipsDamagedAndIncompatible) {
  const std::string dir = shared_dir("latest");
  std::string good, truncated, other_model;
  {
    Pipeline<double> t(deck(), MPI_COMM_WORLD);
    run(t, 0, 2);
    good = checkpoint_path(dir, 2, t.run_id());
    t.save_checkpoint(good);
    run(t, 2, 3);
    truncated = checkpoint_path(dir, 3, t.run_id());
    t.save_checkpoint(truncated);
  }
  if (world_rank() == 0) fs::resize_file(truncated, fs::file_size(truncated) / 2);
  const Deck eight = deck("[{type: dense, units: 10}, {type: gelu}, {type: dense, units: 8}, "
                          "{type: tanh}, {type: dense, units: 3}]");
  {
    Pipeline<double> t(eight, MPI_COMM_WORLD);
    run(t, 0, 1);
    other_model = checkpoint_path(dir, 1, t.run_id());
    t.save_checkpoint(other_model);  // newest of all, but another model
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const LatestCheckpoint l = latest(dir);
  EXPECT_EQ(l.path, good);
  EXPECT_EQ(l.info.step, 2);
  ASSERT_EQ(l.skipped.size(), 2u);
  EXPECT_EQ(l.skipped[0], other_model + ": the checkpoint has 5 layers, the model has 9");
  EXPECT_EQ(l.skipped[1], truncated + ": not a readable HDF5 checkpoint (corrupt or truncated)");
  // The other model's run finds its own file.
  EXPECT_EQ(latest(dir, eight).path, other_model);
}

// A checkpoint is never written from non-finite weights; the failure of one
// rank (here the last holds the NaN) is agreed: every rank throws, none waits.
TEST(Checkpoint, NeverWrittenFromNonFiniteWeights) {
  const std::string dir = shared_dir("nan");
  Pipeline<double> t(deck(), MPI_COMM_WORLD);
  run(t, 0, 1);
  if (world_rank() == world_size() - 1) {
    auto p = Kokkos::create_mirror_view(t.cell().parameters());
    Kokkos::deep_copy(p, t.cell().parameters());
    p(p.extent(0) - 1) = std::numeric_limits<double>::quiet_NaN();
    Kokkos::deep_copy(t.cell().parameters(), p);
  }
  const std::string path = checkpoint_path(dir, 1, t.run_id());
  try {
    t.save_checkpoint(path);
    ADD_FAILURE() << "expected PipelineError";
  } catch (const PipelineError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": not written: the parameters of layer 8 (dense) in cell " +
                  std::to_string(world_size() - 1) + " are not finite");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// A write that fails is agreed and leaves no file under a checkpoint's name.
TEST(Checkpoint, FailedWriteIsAgreed) {
  const std::string dir = shared_dir("unwritable");
  if (world_rank() == 0) std::ofstream(dir + "/file") << "a file, not a directory";
  MPI_Barrier(MPI_COMM_WORLD);
  Pipeline<double> t(deck(), MPI_COMM_WORLD);
  const std::string path = dir + "/file/ckpt_000000000.h5";
  try {
    t.save_checkpoint(path);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {  // and HDF5's own reason (issue 25, class 7)
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path + ".tmp: cannot create checkpoint file: HDF5: ", 0), 0u) << what;
  }
}

// One rank failing: every rank learns the first failing rank's error.
TEST(Agreed, FirstFailingRanksErrorOnEveryRank) {
  const int K = world_size();
  try {
    agreed(MPI_COMM_WORLD, [&] {
      if (world_rank() == K - 1) throw InputError("rank " + std::to_string(K - 1) + " failed");
    });
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(K - 1) + " failed");
    EXPECT_NE(dynamic_cast<const Agreed*>(&e), nullptr);
  }
  EXPECT_NO_THROW(agreed(MPI_COMM_WORLD, [] {}));
  EXPECT_EQ(any_rank(world_rank() == 0, MPI_COMM_WORLD), true);
  EXPECT_EQ(any_rank(false, MPI_COMM_WORLD), false);
}

// A restart with another batch size resumes by samples seen: the epoch's
// remaining samples are trained, and its loss covers the whole epoch.
TEST(Restart, AnotherBatchSizeResumesBySamplesSeen) {
  const std::string dir = shared_dir("batch");
  Deck d = deck();
  d.checkpoint.directory = dir;
  d.checkpoint.every_steps = 1;
  d.checkpoint.every_epochs = 0;
  d.training.progress_every = 0;
  std::string first;
  {
    Pipeline<double> t(d, MPI_COMM_WORLD);
    // 15 of the epoch's 45 samples; the loss (on the last rank) goes into the position.
    double loss = t.step(data(), epoch_order(data().samples, d.seed, 0, true), 0, kBatch).loss;
    MPI_Bcast(&loss, 1, MPI_DOUBLE, world_size() - 1, MPI_COMM_WORLD);
    t.set_position({0, kBatch, loss, kBatch});
    first = checkpoint_path(dir, 1, t.run_id());
    t.save_checkpoint(first);
  }
  Deck five = d;
  five.training.batch_size = 5;  // 3 steps of 15 become 9 of 5
  Pipeline<double> t(five, MPI_COMM_WORLD);
  const CheckpointInfo info = t.load_checkpoint(latest(dir, five).path);
  EXPECT_EQ(info.batch_size, kBatch);
  EXPECT_EQ(info.epoch_samples, kBatch);
  const DataPosition p = restart_position(info, first, five, data().samples);
  EXPECT_EQ(p.epoch, 0);
  EXPECT_EQ(p.epoch_samples, kBatch);
  t.set_position(p);
  const auto reports = fit(t, data(), data(), nullptr);
  ASSERT_EQ(reports.size(), 1u);  // not "nothing to train"
  EXPECT_EQ(t.steps_done(), 1 + 6);
  EXPECT_EQ(reports[0].train_samples, data().samples);
  EXPECT_TRUE(reports[0].train_loss_whole_epoch);
  EXPECT_TRUE(std::isfinite(reports[0].train_loss));
}

TEST(Trace, StepsContainTheirEventsAndTimesAddUp) {
  // Exact whatever the load: preemption between two operations lands in "other".
  // Wide enough layers that a step takes milliseconds, not microseconds.
  Deck d = deck("[{type: dense, units: 512}, {type: gelu}, {type: dense, units: 512}, {type: tanh}, "
                "{type: dense, units: 512}, {type: relu}, {type: dense, units: 3}]");
  d.trace.file = "unused.h5";
  d.trace.every = 2;
  Pipeline<double> t(d, MPI_COMM_WORLD);
  run(t, 0, 5);
  const Tracer& tracer = t.tracer();
  ASSERT_EQ(tracer.steps().size(), 4u);  // steps 0, 2, 4 and 1 (the warm-up 0 is not alone)
  std::set<std::int64_t> recorded;
  for (const auto& s : tracer.steps()) {
    recorded.insert(s.step);
    EXPECT_EQ(s.compute_ns + s.comm_ns + s.idle_ns + s.other_ns, s.step_ns) << "step " << s.step;
    EXPECT_GT(s.compute_ns, 0);
    EXPECT_GE(s.other_ns, 0);
    EXPECT_EQ(s.peak_activation_bytes, t.cell().activation_bytes());
    int forwards = 0, backwards = 0;
    for (const auto& e : tracer.events()) {
      if (e.step != s.step) continue;
      EXPECT_GE(e.start, s.start);
      EXPECT_LE(e.end, s.end);
      EXPECT_LE(e.start, e.end);
      forwards += e.kind == std::int8_t(EventKind::Forward);
      backwards += e.kind == std::int8_t(EventKind::Backward);
    }
    EXPECT_EQ(forwards, 4);  // M = 4
    EXPECT_EQ(backwards, 4);
  }
  EXPECT_EQ(recorded, (std::set<std::int64_t>{0, 1, 2, 4}));
  const GatheredTrace all = gather_trace(tracer, MPI_COMM_WORLD);
  if (world_rank() == 0) {
    ASSERT_EQ(int(all.steps.size()), world_size());
    double sum = 0;
    for (const auto& r : all.steps)  // without each rank's warm-up step 0
      for (std::size_t i = 1; i < r.size(); ++i) sum += r[i].idle_fraction;
    EXPECT_DOUBLE_EQ(all.measured_bubble(), sum / (3.0 * world_size()));
    if (world_size() == 1) EXPECT_LT(all.measured_bubble(), 0.05);  // one cell never waits
  }
}

}  // namespace
}  // namespace gpipe

// The V schedules and schedule files on the runner across MPI ranks (ctest
// runs this at 1, 2, 3 and 4 ranks): zb_v and dualpipe_v (2K stages, stage s
// on rank s, then back) give bitwise the weights and loss of 1f1b on one
// rank (every stage accumulates in micro-batch order 0..M-1), with and
// without re-materialization; a schedule file written by write_schedule runs
// the same; a bad file is the same InputError on every rank, naming the file
// and its first bad op, before any traffic. Grouped W (pipeline.w_group):
// bitwise across K (zero_bubble and zb_v at K ranks against zero_bubble on
// one rank with the same groups) and across a restart, within rounding of
// the ungrouped weights, activation bytes exactly the plan's.

#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/schedule_v.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

const std::string kLayers = test::kNineLayers;
constexpr std::int64_t kInput = test::kNineLayersInput, kBatch = 24;
using test::world_rank;
using test::world_size;

std::string deck(int M, const std::string& pipeline) {
  return test::deck_text(kLayers, kInput, kBatch, M, "double", pipeline);
}

using Result = test::PipelineRun;

// Trains `steps` steps (from the checkpoint `restart` when not empty) and
// saves a checkpoint to `save` when not empty.
Result train(const std::string& text, MPI_Comm comm, int steps = 2, const std::string& restart = "",
             const std::string& save = "") {
  return test::run_pipeline(parse_deck(text, "test-deck"), test::synthetic(kBatch * 2, kInput, 3, 99), kBatch, comm,
                            steps, restart, save);
}

TEST(VSchedules, BitwiseOneFOneB) {
  const int K = world_size();
  for (const int M : {2 * K, 3 * K}) {
    Result ref;
    if (world_rank() == 0) ref = train(deck(M, "{schedule: 1f1b}"), MPI_COMM_SELF);
    for (const std::string schedule : {"zb_v", "dualpipe_v"})
      for (const std::string remat : {"never", "always"}) {
        const Result r = train(deck(M, "{schedule: " + schedule + ", remat: " + remat + "}"), MPI_COMM_WORLD);
        EXPECT_EQ(r.stages, 2 * K);
        if (world_rank() == 0) {
          EXPECT_EQ(r.params, ref.params) << schedule << " " << remat << " M=" << M;
          EXPECT_EQ(r.eval_loss, ref.eval_loss) << schedule << " " << remat << " M=" << M;
        }
      }
  }
}

TEST(VSchedules, ScheduleFileRunsAndABadOneIsRefused) {
  const int K = world_size(), M = 2 * K;
  const std::string path = "gpipe_v_schedule_" + std::to_string(K) + ".yaml";
  const std::string bad = "gpipe_v_schedule_bad_" + std::to_string(K) + ".yaml";
  if (world_rank() == 0) {
    std::ofstream(path) << [&] {
      std::ostringstream out;
      write_schedule(out, zb_v(K, M, Remat::Never), "zb_v");
      return out.str();
    }();
    Schedule broken = zb_v(K, M, Remat::Never);
    broken.ops[0].push_back(broken.ops[0][0]);  // F(0) of stage 0 once more, at the end of rank 0's list
    std::ofstream out(bad);
    write_schedule(out, broken, "broken");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Result ref;
  if (world_rank() == 0) ref = train(deck(M, "{schedule: 1f1b}"), MPI_COMM_SELF);
  const Result r = train(deck(M, "{schedule_file: " + path + "}"), MPI_COMM_WORLD);
  if (world_rank() == 0) {
    EXPECT_EQ(r.params, ref.params);
    EXPECT_EQ(r.eval_loss, ref.eval_loss);
  }
  const std::size_t n = zb_v(K, M, Remat::Never).ops[0].size();
  try {
    train(deck(M, "{schedule_file: " + bad + "}"), MPI_COMM_WORLD);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), bad + ": rank 0, op " + std::to_string(n) +
                                         " (F(0) of stage 0): runs twice (first at rank 0, op 0)");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::remove(path.c_str());
    std::remove(bad.c_str());
  }
}

// Grouped W: each Dense layer's weight gradient of a group of w_group
// consecutive micro-batches is one GEMM over their stacked rows. zero_bubble
// and zb_v run every stage's W ops in micro-batch order, so the groups are
// [0, w), [w, 2w), ... whatever K: the same GEMMs in the same order as
// zero_bubble on one rank (bitwise), and within rounding of 1f1b's
// per-micro-batch sums; every rank allocates exactly the plan's bytes.
TEST(GroupedW, BitwiseAcrossKCloseToUngroupedExactBytes) {
  const int K = world_size();
  for (const int M : {2 * K, 3 * K})
    for (const int w : {2, M}) {
      const std::string group = ", w_group: " + std::to_string(w);
      Result ref, ungrouped;
      if (world_rank() == 0) {
        ref = train(deck(M, "{schedule: zero_bubble" + group + "}"), MPI_COMM_SELF);
        ungrouped = train(deck(M, "{schedule: 1f1b}"), MPI_COMM_SELF);
        ASSERT_EQ(ref.params.size(), ungrouped.params.size());
        double worst = 0;
        for (size_t i = 0; i < ref.params.size(); ++i)
          worst = std::max(worst, std::abs(ref.params[i] - ungrouped.params[i]) / std::max(std::abs(ungrouped.params[i]), 1e-3));
        EXPECT_LT(worst, 1e-12) << "M=" << M << " w=" << w;  // docs/design.md: 1e-12 relative (double)
        EXPECT_NE(ref.params, ungrouped.params) << "the groups' GEMMs sum in another order: not bitwise";
      }
      for (const std::string schedule : {"zero_bubble", "zb_v"})
        for (const std::string remat : {"never", "always"}) {
          const std::string text = deck(M, "{schedule: " + schedule + ", remat: " + remat + group + "}");
          const Result r = train(text, MPI_COMM_WORLD);
          const Deck d = parse_deck(text, "test-deck");
          CellOptions options;
          options.max_batch = kBatch;
          options.micro_batches = M;
          options.remat = d.pipeline.remat;
          options.schedule = d.pipeline.schedule;
          options.w_group = w;
          options.custom_schedule = deck_schedule(d, K);  // zb_v: 2K stages on K ranks
          Partition p;
          p.counts = r.partition;
          for (int k = 0; k < K; ++k)
            EXPECT_EQ(r.activation_bytes[size_t(k)], cell_activation_bytes(model_shapes(d.model), p, k, options, 8))
                << schedule << " rank " << k << " M=" << M << " w=" << w;
          if (world_rank() == 0) {
            EXPECT_EQ(r.params, ref.params) << schedule << " " << remat << " M=" << M << " w=" << w;
            EXPECT_EQ(r.eval_loss, ref.eval_loss) << schedule << " " << remat << " M=" << M << " w=" << w;
          }
        }
      // dualpipe_v groups only the W ops it splits: it runs, close to 1f1b.
      const Result dv = train(deck(M, "{schedule: dualpipe_v" + group + "}"), MPI_COMM_WORLD);
      if (world_rank() == 0)
        for (size_t i = 0; i < dv.params.size(); ++i)
          EXPECT_NEAR(dv.params[i], ungrouped.params[i], 1e-12 * std::max(std::abs(ungrouped.params[i]), 1e-3)) << i;
    }
}

// A grouped run restarts bitwise: 2 steps on K ranks, checkpoint, the third
// step on one rank (and the other way round) equal 3 steps straight.
TEST(GroupedW, RestartBitwise) {
  const int K = world_size(), M = 2 * K;
  const std::string grouped = deck(M, "{schedule: zero_bubble, w_group: 3}");
  const Result straight = train(grouped, MPI_COMM_WORLD, 3);
  long long pid = (long long)getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string a = "/tmp/gpipe_test_grouped_w_a_" + std::to_string(pid) + ".h5";
  train(grouped, MPI_COMM_WORLD, 2, "", a);
  if (world_rank() == 0) {
    const Result resumed = train(grouped, MPI_COMM_SELF, 1, a);
    EXPECT_EQ(resumed.params, straight.params);
    EXPECT_EQ(resumed.eval_loss, straight.eval_loss);
  }
  const std::string b = "/tmp/gpipe_test_grouped_w_b_" + std::to_string(pid) + ".h5";
  if (world_rank() == 0) train(grouped, MPI_COMM_SELF, 2, "", b);
  MPI_Barrier(MPI_COMM_WORLD);
  const Result resumed = train(deck(M, "{schedule: zb_v, w_group: 3}"), MPI_COMM_WORLD, 1, b);
  if (world_rank() == 0) {
    EXPECT_EQ(resumed.params, straight.params);
    EXPECT_EQ(resumed.eval_loss, straight.eval_loss);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::remove(a.c_str());
    std::remove(b.c_str());
  }
}

// pipeline.w_group needs W ops, and a schedule file carries its own groups.
TEST(GroupedW, ErrorsNameTheKey) {
  const int K = world_size(), M = 2 * K;
  try {
    train(deck(M, "{schedule: 1f1b, w_group: 2}"), MPI_COMM_WORLD);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "pipeline.w_group: 2 needs a schedule with W ops (zero_bubble, zb_v or dualpipe_v); pipeline.schedule "
              "1f1b has none");
  }
}

}  // namespace
}  // namespace gpipe

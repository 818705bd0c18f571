// The V schedules and schedule files on the runner across MPI ranks (ctest
// runs this at 1, 2, 3 and 4 ranks): zb_v and dualpipe_v (2K stages, stage s
// on rank s, then back) give bitwise the weights and loss of 1f1b on one
// rank (every stage accumulates in micro-batch order 0..M-1), with and
// without re-materialization; a schedule file written by write_schedule runs
// the same; a bad file is the same InputError on every rank, naming the file
// and its first bad op, before any traffic. Grouped W (pipeline.w_group):
// bitwise across K (zero_bubble and zb_v at K ranks against zero_bubble on
// one rank with the same groups) and across a restart, within rounding of
// the ungrouped weights, activation bytes exactly the plan's. pipeline.wait:
// sleep gives bitwise spin's weights and loss for every schedule (and a bad
// value is an error naming the key).

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
#include "gpipe/pipeline/wait.hpp"
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

// pipeline.wait: sleeping between MPI_Test calls (boundary messages, the
// step's collectives) changes only how a rank waits: bitwise the weights and
// loss of spin, for every schedule, grouped W too, and data-parallel
// replicas (gradient buckets). The policy is
// process-wide: the Pipeline constructor sets it from the deck.
TEST(WaitPolicy, SleepIsBitwiseSpin) {
  const int K = world_size(), M = 2 * K;
  for (const std::string schedule :
       {"fill_drain", "1f1b", "zero_bubble", "interleaved_1f1b, chunks: 2", "zb_v", "dualpipe_v, w_group: 2"}) {
    if (schedule.rfind("interleaved", 0) == 0 && 2 * K > 9) continue;  // 2K stages of 9 layers
    const Result spin = train(deck(M, "{schedule: " + schedule + ", wait: spin}"), MPI_COMM_WORLD);
    EXPECT_EQ(wait_policy(), WaitPolicy::Spin) << schedule;
    const Result sleep = train(deck(M, "{schedule: " + schedule + ", wait: sleep}"), MPI_COMM_WORLD);
    EXPECT_EQ(wait_policy(), WaitPolicy::Sleep) << schedule;
    if (world_rank() == 0) {  // the gathered weights
      EXPECT_FALSE(spin.params.empty()) << schedule;
      EXPECT_EQ(sleep.params, spin.params) << schedule;
      EXPECT_EQ(sleep.eval_loss, spin.eval_loss) << schedule;
    }
  }
  // Data parallel: every rank a replica of one cell (D = K), the gradient
  // buckets' all-reduce waited for under each policy.
  if (K > 1) {
    const std::string replicas = "parallel: {cells: 1}\n";
    const Result spin = train(deck(2, "{schedule: 1f1b, wait: spin}") + replicas, MPI_COMM_WORLD);
    const Result sleep = train(deck(2, "{schedule: 1f1b, wait: sleep}") + replicas, MPI_COMM_WORLD);
    if (world_rank() == 0) {
      EXPECT_FALSE(spin.params.empty());
      EXPECT_EQ(sleep.params, spin.params) << "D = " << K;
      EXPECT_EQ(sleep.eval_loss, spin.eval_loss) << "D = " << K;
    }
  }
  set_wait_policy(WaitPolicy::Spin);  // the default, for the tests that follow
}

// The waits themselves: a receive posted before its send completes under
// Sleep (MPI_Test, sleep, test again) with the sent values; an integer
// exact_allreduce and a waited_bcast give the blocking collectives' values.
TEST(WaitPolicy, SleepingWaitsDeliver) {
  const int K = world_size(), rank = world_rank();
  for (const WaitPolicy policy : {WaitPolicy::Spin, WaitPolicy::Sleep}) {
    set_wait_policy(policy);
    std::int64_t v[2] = {rank + 1, -(rank + 1)};
    ASSERT_EQ(exact_allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT_EQ(v[0], K);
    EXPECT_EQ(v[1], -1);
    double x = rank == K - 1 ? 0.1 * K : -1.0;
    ASSERT_EQ(waited_bcast(&x, 1, MPI_DOUBLE, K - 1, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT_EQ(x, 0.1 * K);
    if (K > 1) {  // a ring: rank r sends r * 10 to r + 1 after a pause, so the receive waits
      int got = -1;
      MPI_Request request;
      MPI_Irecv(&got, 1, MPI_INT, (rank + K - 1) % K, 7, MPI_COMM_WORLD, &request);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) usleep(20000);
      int sent = rank * 10;
      MPI_Send(&sent, 1, MPI_INT, (rank + 1) % K, 7, MPI_COMM_WORLD);
      ASSERT_EQ(wait_request(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(request, MPI_REQUEST_NULL);
      EXPECT_EQ(got, ((rank + K - 1) % K) * 10);
    }
  }
  set_wait_policy(WaitPolicy::Spin);
}

TEST(WaitPolicy, ABadValueNamesTheKey) {
  try {
    parse_deck(deck(2, "{wait: nap}"), "test-deck");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what(), tail = ": pipeline.wait: expected spin or sleep, got 'nap'";
    EXPECT_EQ(what.rfind("test-deck:", 0), 0u) << what;  // the deck's name, line and column first
    ASSERT_GE(what.size(), tail.size()) << what;
    EXPECT_EQ(what.substr(what.size() - tail.size()), tail) << what;
  }
}

}  // namespace
}  // namespace gpipe

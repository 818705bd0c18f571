// The V schedules and schedule files on the runner across MPI ranks (ctest
// runs this at 1, 2, 3 and 4 ranks): zb_v and dualpipe_v (2K stages, stage s
// on rank s, then back) give bitwise the weights and loss of 1f1b on one
// rank (every stage accumulates in micro-batch order 0..M-1), with and
// without re-materialization; a schedule file written by write_schedule runs
// the same; a bad file is the same InputError on every rank, naming the file
// and its first bad op, before any traffic.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
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

Result train(const std::string& text, MPI_Comm comm) {
  return test::run_pipeline(parse_deck(text, "test-deck"), test::synthetic(kBatch * 2, kInput, 3, 99), kBatch, comm);
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

}  // namespace
}  // namespace gpipe

// Rank-local input errors while a pipeline is built (ctest runs this at 1, 2,
// 3 and 4 ranks): a schedule file that one rank cannot read, or that differs
// on one rank (node-local copies), stops every rank with the same InputError
// instead of leaving the other ranks waiting in a collective (before the
// fix rank 0 waited in the cell's MPI_Comm_dup while the failed rank waited
// in the agreement: a hang). Each test is collective; a hang fails ctest's
// timeout.

#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

constexpr int kM = 4;

Deck deck_with_file(const std::string& path) {
  Deck d = parse_deck(test::deck_text(test::kNineLayers, test::kNineLayersInput, 8, kM, "double"), "test-deck");
  d.pipeline.schedule_file = path;
  return d;
}

// A file name no concurrent test process shares (rank 0's process id).
std::string file_name(const std::string& what) {
  long long pid = (long long)getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return "/tmp/gpipe_test_rank_local_" + what + "_" + std::to_string(pid) + ".yaml";
}

void write(const std::string& path, const Schedule& s, const std::string& name) {
  std::ofstream out(path);
  write_schedule(out, s, name);
}

// The message every rank caught from building the pipeline ("(no error)").
std::string build_error(const Deck& d) {
  try {
    Pipeline<double> p(d, MPI_COMM_WORLD);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RankLocalInputs, ScheduleFileMissingOnTheLastRankStopsEveryRank) {
  const int K = world_size(), rank = world_rank();
  const std::string good = file_name("good"), missing = file_name("missing");
  if (rank == 0) write(good, one_f_one_b(K, kM, Remat::Never), "1f1b");
  MPI_Barrier(MPI_COMM_WORLD);
  // The last rank's copy is missing (K = 1: rank 0's).
  const std::string mine = rank == K - 1 ? missing : good;
  EXPECT_EQ(build_error(deck_with_file(mine)), missing + ": cannot open schedule file (missing or unreadable)");
  // The same deck on every rank builds (the check costs no false alarm).
  EXPECT_EQ(build_error(deck_with_file(good)), "(no error)");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::remove(good.c_str());
}

TEST(RankLocalInputs, ScheduleFileDifferingOnOneRankStopsEveryRank) {
  const int K = world_size(), rank = world_rank();
  if (K == 1) GTEST_SKIP() << "one rank holds one schedule";
  const std::string a = file_name("a"), b = file_name("b");
  if (rank == 0) {
    write(a, one_f_one_b(K, kM, Remat::Never), "1f1b");
    write(b, zero_bubble(K, kM, Remat::Never), "zero_bubble");  // valid, but another op list
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Rank 1's node-local copy holds zero_bubble: running it against the
  // others' 1f1b would deadlock the first step.
  EXPECT_EQ(build_error(deck_with_file(rank == 1 ? b : a)),
            "pipeline.schedule_file " + b +
                ": rank 1 holds another schedule than rank 0 (every rank reads the file: it must be the same file on "
                "every rank)");
  // A second instance of the class: the same name, different remat list.
  if (rank == 0) write(b, one_f_one_b(K, kM, Remat::Always), "1f1b");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(build_error(deck_with_file(rank == K - 1 ? b : a)),
            "pipeline.schedule_file " + b + ": rank " + std::to_string(K - 1) +
                " holds another schedule than rank 0 (every rank reads the file: it must be the same file on every "
                "rank)");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::remove(a.c_str());
    std::remove(b.c_str());
  }
}

// A deck that differs on one rank (a node-local copy, or per-rank --set in
// an MPMD launch): before, the ranks trained on different hyper-parameters
// without a word, or (parallel.cells) split different grids and hung. Now
// Pipeline's constructor compares every rank's parsed deck with rank 0's
// and stops every rank with the first difference.
TEST(RankLocalInputs, DeckDifferingOnOneRankStopsEveryRank) {
  const int K = world_size(), rank = world_rank();
  if (K == 1) GTEST_SKIP() << "one rank reads one deck";
  const std::string text = test::deck_text(test::kNineLayers, test::kNineLayersInput, 8, kM, "double");
  const std::string last = std::to_string(K - 1);
  const auto built = [&](const std::vector<std::string>& sets) {
    return build_error(parse_deck(text, rank == K - 1 ? "copy.yaml" : "test-deck", rank == K - 1 ? sets
                                                                                                   : std::vector<std::string>{}));
  };
  EXPECT_EQ(built({"optimizer.lr=0.5"}),
            "copy.yaml: rank " + last +
                " read another deck than rank 0 (test-deck): first difference in section optimizer: rank " + last +
                " has 'optimizer: {type: adam, lr: 0.5}', rank 0 has 'optimizer: {type: adam, lr: 0.01}' (the deck "
                "as parsed, after --set); every rank must read the same deck with the same --set options");
  // The hang: another grid on one rank.
  EXPECT_EQ(built({"parallel.cells=1"}),
            "copy.yaml: rank " + last +
                " read another deck than rank 0 (test-deck): first difference in section parallel: rank " + last +
                " has 'parallel:', rank 0 has '(end of the deck)' (the deck as parsed, after --set); every rank must "
                "read the same deck with the same --set options");
  // The same text under another file name is the same deck.
  EXPECT_EQ(built({}), "(no error)");
}

}  // namespace
}  // namespace gpipe

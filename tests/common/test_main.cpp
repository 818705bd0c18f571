// One test main that owns the runtime: MPI, then Kokkos, then GoogleTest;
// finalized in reverse. Only rank 0 prints results.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "gpipe/core/runtime.hpp"

namespace {
// Ranks other than 0 print only their failures, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& info) override { test_ = info.name(); }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::printf("[rank %d] %s:%d: failure in %s\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                  r.line_number(), test_.c_str(), r.summary());
  }

 private:
  int rank_;
  std::string test_;
};
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;  // the lifecycle gpipe documents: MPI_THREAD_FUNNELED is enough for every backend
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int result = 0;
  // A Kokkos that cannot start (no usable GPU, a bad --kokkos-* option) is a
  // clear error with a non-zero status on every rank, not an abort.
  bool owns_kokkos = false;
  try {
    owns_kokkos = gpipe::initialize_kokkos(argc, argv);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
    MPI_Finalize();
    return 1;
  }
  {
    ::testing::InitGoogleTest(&argc, argv);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter(rank));
    }
    result = RUN_ALL_TESTS();
    // A failure on any rank fails the run.
    int global = 0;
    MPI_Allreduce(&result, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    result = global;
  }
  if (owns_kokkos) Kokkos::finalize();
  MPI_Finalize();
  return result;
}

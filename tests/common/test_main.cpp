// One test main that owns the runtime: MPI, then Kokkos, then GoogleTest;
// finalized in reverse. Only rank 0 prints results.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int result = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    result = RUN_ALL_TESTS();
    // A failure on any rank fails the run.
    int global = 0;
    MPI_Allreduce(&result, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    result = global;
  }
  MPI_Finalize();
  return result;
}

#pragma once
// Shared helpers of the Google Benchmark suite: manual timing around fences
// and a context that records the build.

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cstdio>
#include <exception>

#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/core/runtime.hpp"

namespace gpipe::bench {

/// Times `body` per iteration with a fence at the end (SetIterationTime);
/// returns the total seconds over all iterations.
template <class F>
double timed(benchmark::State& state, F&& body) {
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    body();
    compat::fence("gpipe::bench");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += seconds;
    state.SetIterationTime(seconds);
  }
  return total;
}

/// A rate counter: `amount` per iteration, reported per second (e.g. GFLOP/s).
inline benchmark::Counter rate(const benchmark::State& state, double amount) {
  return benchmark::Counter(amount * double(state.iterations()), benchmark::Counter::kIsRate);
}

/// The benchmark executables' main (MPI initialized by the caller): Kokkos,
/// Google Benchmark (with the build description in the context), then
/// finalize in reverse. A Kokkos that cannot start is "PROGRAM: error: ..."
/// and status 1, not an abort.
inline int run_benchmarks(int argc, char** argv) {
  bool owns_kokkos = false;
  try {
    owns_kokkos = initialize_kokkos(argc, argv);
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
    MPI_Finalize();
    return 1;
  }
  {
    benchmark::Initialize(&argc, argv);
    benchmark::AddCustomContext("gpipe_build", build_description());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  if (owns_kokkos) Kokkos::finalize();
  MPI_Finalize();
  return 0;
}

/// main() of a benchmark that needs `min_ranks`..`max_ranks` MPI ranks
/// (MPI_Init is the caller's): refuses other counts with exit status 2, and
/// only rank 0 prints.
inline int run_mpi_benchmarks(int argc, char** argv, const char* name, int min_ranks, int max_ranks) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < min_ranks || size > max_ranks) {
    if (rank == 0)
      std::fprintf(stderr, "%s: run with %s %d ranks (mpirun -n %d)\n", name,
                   min_ranks == max_ranks ? "exactly" : "at least", min_ranks, min_ranks);
    MPI_Finalize();
    return 2;
  }
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  return run_benchmarks(argc, argv);
}

}  // namespace gpipe::bench

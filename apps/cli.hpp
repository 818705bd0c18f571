#pragma once
// Shared by the command-line tools (gpipe-train, gpipe-infer): what they do
// before, or instead of, starting MPI and Kokkos. --help, --version, --list-keys
// and --check initialize neither, so a CUDA build answers them on a login
// node without a GPU.

#include <memory>
#include <string>

#include "gpipe/core/runtime.hpp"

namespace gpipe::app {

/// This process's rank as the MPI launcher announces it in the environment
/// (Open MPI, MPICH/Hydra, PMIx, Slurm's srun), read before MPI_Init; 0 when
/// none is set (a plain serial start). Output that comes before MPI_Init
/// (help, version, option errors) is printed by launcher rank 0 only.
int launcher_rank();

/// The Kokkos runtime options section of --help: static text for the Kokkos
/// version this build was compiled against (no Kokkos initialization).
std::string kokkos_options_help();

/// Starts MPI and Kokkos (gpipe::Runtime). On failure (MPI's thread level,
/// Kokkos initialization on any rank, e.g. no usable GPU) prints
/// "PROGRAM: error: ..." once and returns null; the caller exits with status
/// kExitRuntimeError.
std::unique_ptr<Runtime> start_runtime(const char* program, int& argc, char**& argv);

}  // namespace gpipe::app

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

/// "" when the environment's settings of gpipe are valid, else the error
/// of the first invalid one: today GPIPE_KERNELS (gpipe/kernels/backend.hpp),
/// e.g. "environment variable GPIPE_KERNELS: unknown kernels 'fast'
/// (expected auto, portable or onednn)". Local; starts nothing.
std::string environment_error();

/// The exit status of --version once CLI11 printed the build (whose
/// "kernels selected" line already shows the error): 0, or kExitInputError
/// with "PROGRAM: error: MESSAGE" on stderr (when `print`) for an invalid
/// environment, which every run would refuse too.
int version_status(const char* program, bool print);

/// Starts MPI and Kokkos (gpipe::Runtime). On failure (MPI's thread level,
/// Kokkos initialization on any rank, e.g. no usable GPU) prints
/// "PROGRAM: error: ..." once and returns null; the caller exits with status
/// kExitRuntimeError.
std::unique_ptr<Runtime> start_runtime(const char* program, int& argc, char**& argv);

}  // namespace gpipe::app

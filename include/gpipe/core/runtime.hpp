#pragma once
// Process-wide runtime: MPI, then Kokkos; finalized in reverse order.

#include <string>

namespace gpipe {

/// RAII owner of MPI_Init_thread/MPI_Finalize and Kokkos::initialize/finalize.
/// Create one in main() before any other gpipe object. MPI is initialized
/// with required_mpi_thread_level(); Kokkos with initialize_kokkos (collective
/// over MPI_COMM_WORLD). If MPI or Kokkos is already initialized (a host code
/// owns it), it is left to its owner. Throws StateError, on every rank, when
/// MPI provides a lower thread level or Kokkos fails to initialize on any rank
/// (e.g. a CUDA build on a node without a usable GPU); MPI is finalized again
/// before the throw if this object initialized it. Catch it in main() and
/// exit with a message: nothing else of gpipe is usable then.
class Runtime {
 public:
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
};

/// Initializes Kokkos with the command line (Kokkos removes the --kokkos-*
/// options it knows from argc/argv) unless Kokkos is already initialized;
/// returns true if this call initialized it. Collective over MPI_COMM_WORLD
/// (MPI must be initialized): if Kokkos::initialize throws on any rank, every
/// rank throws StateError "Kokkos initialization failed on rank R: <Kokkos'
/// message>" (R the lowest failing rank) instead of leaving the others
/// waiting. A failure that Kokkos reports with Kokkos::abort (Kokkos 4: a
/// malformed --kokkos-* value, an unusable device) cannot be caught: while
/// Kokkos::initialize runs, SIGABRT is handled by printing "<program>: error:
/// Kokkos initialization failed on rank R: Kokkos aborted (its message is
/// above)" and exiting with status 1 (mpirun then ends the other ranks); the
/// previous SIGABRT handler is restored afterwards.
bool initialize_kokkos(int& argc, char**& argv);

/// Versions of gpipe and the libraries it runs on, for run records.
struct BuildInfo {
  std::string gpipe;            ///< e.g. "0.1.0"
  std::string kokkos;           ///< e.g. "3.4.1"
  std::string execution_space;  ///< e.g. "Serial", "Cuda"
  std::string memory_space;     ///< e.g. "Host", "Cuda"
  std::string mpi;              ///< MPI_Get_library_version, first line (e.g. "Open MPI v4.1.4")
  std::string hdf5;             ///< e.g. "1.10.8"
  bool gpu_aware_mpi = false;   ///< GPIPE_ENABLE_GPU_AWARE_MPI
};
/// The versions this process runs with. Needs neither MPI nor Kokkos to be
/// initialized (MPI_Get_library_version may be called before MPI_Init), so
/// `--version` works on a login node without a GPU.
BuildInfo build_info();

/// The MPI thread level gpipe needs with this build's Kokkos backend: gpipe
/// calls MPI only from the thread that created its objects, so
/// MPI_THREAD_SINGLE with a serial host backend and MPI_THREAD_FUNNELED with a
/// threaded one (OpenMP, Threads) or a device backend.
int required_mpi_thread_level();

/// One line per component: gpipe, Kokkos version, execution and memory
/// space, MPI library, GPU-aware MPI on/off.
std::string build_description();

}  // namespace gpipe

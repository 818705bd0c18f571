#include "gpipe/core/runtime.hpp"
#include "gpipe/kernels/backend.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <csignal>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#include "gpipe/config.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe {

int required_mpi_thread_level() {
#if defined(KOKKOS_ENABLE_SERIAL)
  if (std::is_same<ExecSpace, Kokkos::Serial>::value) return MPI_THREAD_SINGLE;
#endif
  return MPI_THREAD_FUNNELED;
}

Runtime::Runtime(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, required_mpi_thread_level(), &provided);
    owns_mpi_ = true;
    if (provided < required_mpi_thread_level()) {
      MPI_Finalize();
      throw StateError("MPI provides thread level " + std::to_string(provided) + ", below the " +
                       std::to_string(required_mpi_thread_level()) +
                       " (MPI_THREAD_FUNNELED) that the Kokkos " + ExecSpace::name() + " backend needs");
    }
  }
  try {
    owns_kokkos_ = initialize_kokkos(argc, argv);
  } catch (...) {
    if (owns_mpi_) MPI_Finalize();
    throw;
  }
}

namespace {

// Kokkos 4 reports some initialization errors (a malformed --kokkos-* value,
// an unusable device) with Kokkos::abort, which prints its message and calls
// std::abort(): no exception to turn into an agreed error. While
// Kokkos::initialize runs, SIGABRT is caught instead: one line naming the
// program and the rank, then exit status 1 (mpirun then ends the other ranks).
// The text is formatted before the handler is installed (async-signal-safe).
char abort_line[256];
std::size_t abort_line_size = 0;

extern "C" void kokkos_initialize_aborted(int) {
  if (abort_line_size > 0) {
    const ssize_t written = ::write(STDERR_FILENO, abort_line, abort_line_size);
    (void)written;
  }
  ::_exit(1);
}

class AbortDuringKokkosInitialize {
 public:
  AbortDuringKokkosInitialize(int argc, char** argv) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string program = argc > 0 && argv && argv[0] ? argv[0] : "gpipe";
    const auto slash = program.find_last_of('/');
    if (slash != std::string::npos) program = program.substr(slash + 1);
    const std::string line = program + ": error: Kokkos initialization failed on rank " + std::to_string(rank) +
                             ": Kokkos aborted (its message is above)\n";
    abort_line_size = std::min(line.size(), sizeof(abort_line));
    std::memcpy(abort_line, line.data(), abort_line_size);
    previous_ = std::signal(SIGABRT, kokkos_initialize_aborted);
  }
  ~AbortDuringKokkosInitialize() { std::signal(SIGABRT, previous_ == SIG_ERR ? SIG_DFL : previous_); }
  AbortDuringKokkosInitialize(const AbortDuringKokkosInitialize&) = delete;
  AbortDuringKokkosInitialize& operator=(const AbortDuringKokkosInitialize&) = delete;

 private:
  void (*previous_)(int) = SIG_DFL;
};

}  // namespace

bool initialize_kokkos(int& argc, char**& argv) {
  int already = Kokkos::is_initialized() ? 1 : 0;
  std::string error;
  if (!already) {
    const AbortDuringKokkosInitialize guard(argc, argv);
    try {
      Kokkos::initialize(argc, argv);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
  }
  const Agreement a = agree(error.empty() ? 0 : 3, error, MPI_COMM_WORLD);
  if (a.failed) {
    // A rank whose Kokkos did start keeps no half-started runtime behind.
    if (error.empty() && !already && Kokkos::is_initialized()) Kokkos::finalize();
    std::string message = a.message;
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    throw StateError("Kokkos initialization failed on rank " + std::to_string(a.first_rank) + ": " +
                     message);
  }
  return !already;
}

Runtime::~Runtime() {
  if (owns_kokkos_) Kokkos::finalize();
  if (owns_mpi_) MPI_Finalize();
}

BuildInfo build_info() {
  BuildInfo b;
  b.gpipe = GPIPE_VERSION_STRING;
  std::ostringstream kokkos;
  kokkos << KOKKOS_VERSION / 10000 << "." << (KOKKOS_VERSION / 100) % 100 << "." << KOKKOS_VERSION % 100;
  b.kokkos = kokkos.str();
  b.execution_space = ExecSpace::name();
  b.memory_space = MemSpace::name();
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  b.mpi.assign(mpi_version, static_cast<size_t>(length));
  if (auto cut = b.mpi.find_first_of(",\n"); cut != std::string::npos) b.mpi.resize(cut);
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  b.hdf5 = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
#ifdef GPIPE_ENABLE_GPU_AWARE_MPI
  b.gpu_aware_mpi = true;
#endif
  return b;
}

std::string build_description() {
  const BuildInfo b = build_info();
  std::ostringstream out;
  out << "gpipe-kokkos " << b.gpipe << "\n";
  out << "Kokkos " << b.kokkos << ", execution space " << b.execution_space << ", memory space "
      << b.memory_space << "\n";
  out << "HDF5 " << b.hdf5 << "\n";
  out << "MPI: " << b.mpi << ", GPU-aware MPI: " << (b.gpu_aware_mpi ? "on" : "off (host staging)") << "\n";
  out << kernels::build_summary() << "\n";
  out << "kernels selected " << kernels::selection_summary();
  return out.str();
}

}  // namespace gpipe

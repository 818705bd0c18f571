#include "gpipe/core/runtime.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <sstream>

#include "gpipe/config.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe {

Runtime::Runtime(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(&argc, &argv);
    owns_mpi_ = true;
  }
  Kokkos::initialize(argc, argv);
}

Runtime::~Runtime() {
  Kokkos::finalize();
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
  out << "MPI: " << b.mpi << ", GPU-aware MPI: " << (b.gpu_aware_mpi ? "on" : "off (host staging)");
  return out.str();
}

}  // namespace gpipe

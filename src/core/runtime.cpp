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

std::string build_description() {
  std::ostringstream out;
  out << "gpipe-kokkos " << GPIPE_VERSION_STRING << "\n";
  out << "Kokkos " << KOKKOS_VERSION / 10000 << "." << (KOKKOS_VERSION / 100) % 100 << "."
      << KOKKOS_VERSION % 100 << ", execution space " << ExecSpace::name() << ", memory space "
      << MemSpace::name() << "\n";
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (auto cut = mpi.find_first_of(",\n"); cut != std::string::npos) mpi.resize(cut);
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  out << "HDF5 " << major << "." << minor << "." << release << "\n";
  out << "MPI: " << mpi << ", GPU-aware MPI: "
#ifdef GPIPE_ENABLE_GPU_AWARE_MPI
      << "on";
#else
      << "off (host staging)";
#endif
  return out.str();
}

}  // namespace gpipe

#pragma once
// Process-wide runtime: MPI, then Kokkos; finalized in reverse order.

#include <string>

namespace gpipe {

/// RAII owner of MPI_Init/MPI_Finalize and Kokkos::initialize/finalize.
/// Create one in main() before any other gpipe object. If MPI is already
/// initialized (a host code owns it), it is left to its owner.
class Runtime {
 public:
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  bool owns_mpi_ = false;
};

/// One line per component: gpipe, Kokkos version, execution and memory
/// space, MPI library, GPU-aware MPI on/off.
std::string build_description();

}  // namespace gpipe

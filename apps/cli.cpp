#include "cli.hpp"

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "abort_on_error.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/kernels/backend.hpp"

namespace gpipe::app {

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

std::string kokkos_options_help() {
  std::string text =
      "Kokkos runtime options (read by Kokkos when training starts; not by --help, --version, "
      "--list-keys or --check, which never start Kokkos):\n"
      "  --kokkos-help                 Kokkos' own list of its options\n";
#if KOKKOS_VERSION >= 40000
  text +=
      "  --kokkos-num-threads=INT      host threads (OpenMP/Threads backends)\n"
      "  --kokkos-device-id=INT        the GPU this rank uses\n"
      "  --kokkos-map-device-id-by=mpi_rank|random\n"
      "                                how ranks choose a GPU when no id is given\n"
      "  --kokkos-print-configuration  print the Kokkos configuration at start-up\n";
#else
  text +=
      "  --kokkos-threads=INT          host threads (OpenMP/Threads backends)\n"
      "  --kokkos-numa=INT             NUMA regions used\n"
      "  --kokkos-device-id=INT        the GPU this rank uses\n"
      "  --kokkos-num-devices=INT[,SKIP]\n"
      "                                GPUs per node to cycle over by node-local rank\n";
#endif
  text +=
      "  --kokkos-disable-warnings     silence Kokkos' start-up warnings\n"
      "  --kokkos-tools-libs=LIB       a Kokkos Tools profiling library\n"
      "  --kokkos-tools-args=ARGS      its arguments\n"
      "The same settings may come from the environment (e.g. KOKKOS_NUM_THREADS, "
      "KOKKOS_DEVICE_ID; OMP_NUM_THREADS for OpenMP).";
  return text;
}

std::string environment_error() {
  try {
    (void)kernels::selected();  // parses GPIPE_KERNELS
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

int version_status(const char* program, bool print) {
  const std::string error = environment_error();
  if (error.empty()) return 0;
  if (print) std::cerr << program << ": error: " << error << "\n";
  return kExitInputError;
}

std::unique_ptr<Runtime> start_runtime(const char* program, int& argc, char**& argv) {
  try {
    return std::make_unique<Runtime>(argc, argv);
  } catch (const std::exception& e) {
    // Every rank throws the same agreed error: print it once.
    if (launcher_rank() == 0) std::cerr << program << ": error: " << e.what() << "\n";
  }
  return nullptr;
}

}  // namespace gpipe::app

# Dependency discovery for gpipe-kokkos, in one place.
#
# Works with Debian's Trilinos-packaged Kokkos 3.4 (Serial) and with a site's
# Kokkos 4.x/5.x (any backend) found through Kokkos_ROOT / KokkosKernels_ROOT.

find_package(Kokkos REQUIRED)
message(STATUS "gpipe: Kokkos ${Kokkos_VERSION}, devices: ${Kokkos_DEVICES}")

find_package(KokkosKernels REQUIRED)
include(GpipeKokkosQuirks)
if(NOT TARGET Kokkos::kokkoskernels)
  message(FATAL_ERROR "gpipe: found KokkosKernels but neither Kokkos::kokkoskernels "
                      "nor trilinos_kokkoskernels is a target")
endif()

find_package(MPI REQUIRED COMPONENTS C CXX)
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "gpipe: checkpoints need a parallel (MPI) HDF5 build; found a serial one "
                      "(Debian: apt-get install libhdf5-openmpi-dev; clusters: load the MPI HDF5 module)")
endif()
find_package(yaml-cpp REQUIRED)
find_package(ZLIB REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)

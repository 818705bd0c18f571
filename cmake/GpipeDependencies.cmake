# Dependency discovery for gpipe-kokkos, in one place.
#
# Works with Debian's Trilinos-packaged Kokkos 3.4 (Serial) and with a site's
# Kokkos 4.x/5.x (any backend) found through Kokkos_ROOT / KokkosKernels_ROOT.

find_package(Kokkos REQUIRED)
# Debian quirk: Kokkos::kokkos lists a non-existent include directory
# (/usr/lib/include). Point the target at Kokkos_INCLUDE_DIRS instead.
if(TARGET Kokkos::kokkos AND DEFINED Kokkos_INCLUDE_DIRS)
  get_target_property(_gpipe_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_gpipe_kk_inc_ok TRUE)
  foreach(_dir IN LISTS _gpipe_kk_inc)
    if(NOT _dir MATCHES "^\\$<" AND NOT EXISTS "${_dir}")
      set(_gpipe_kk_inc_ok FALSE)
    endif()
  endforeach()
  if(NOT _gpipe_kk_inc_ok)
    set_target_properties(Kokkos::kokkos PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
  endif()
endif()
message(STATUS "gpipe: Kokkos ${Kokkos_VERSION}, devices: ${Kokkos_DEVICES}")

find_package(KokkosKernels REQUIRED)
# Debian/Trilinos names the target trilinos_kokkoskernels; standalone
# Kokkos Kernels installs Kokkos::kokkoskernels.
if(TARGET Kokkos::kokkoskernels)
  set(GPIPE_KOKKOSKERNELS_TARGET Kokkos::kokkoskernels)
elseif(TARGET trilinos_kokkoskernels)
  set(GPIPE_KOKKOSKERNELS_TARGET trilinos_kokkoskernels)
else()
  message(FATAL_ERROR "gpipe: found KokkosKernels but neither Kokkos::kokkoskernels "
                      "nor trilinos_kokkoskernels is a target")
endif()

find_package(MPI REQUIRED COMPONENTS CXX)
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

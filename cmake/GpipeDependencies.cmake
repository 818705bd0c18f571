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

# oneDNN (x86 CPUs; Debian 12: libdnnl-dev 2.6.3): an implementation of the
# kernel seam (src/kernels/*_onednn.cpp). On by default where it is found.
# Its CMake package (dnnl-config.cmake) needs OpenCL when oneDNN was built
# with the OpenCL GPU runtime (Debian's is); without that package the
# library and header are looked up directly.
find_package(dnnl CONFIG QUIET)
if(NOT dnnl_FOUND)
  find_library(GPIPE_DNNL_LIBRARY NAMES dnnl)
  find_path(GPIPE_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
endif()
set(_gpipe_dnnl_found OFF)
if(dnnl_FOUND OR (GPIPE_DNNL_LIBRARY AND GPIPE_DNNL_INCLUDE_DIR))
  set(_gpipe_dnnl_found ON)
endif()
option(GPIPE_ENABLE_ONEDNN "Build the oneDNN implementation of the kernel seam (x86 CPUs)" ${_gpipe_dnnl_found})
if(GPIPE_ENABLE_ONEDNN)
  if(NOT _gpipe_dnnl_found)
    message(FATAL_ERROR "gpipe: GPIPE_ENABLE_ONEDNN=ON but oneDNN was not found (Debian: apt-get install "
                        "libdnnl-dev; elsewhere set dnnl_DIR); or configure with -DGPIPE_ENABLE_ONEDNN=OFF")
  endif()
  if(dnnl_FOUND)
    set(GPIPE_DNNL_TARGET DNNL::dnnl)
    message(STATUS "gpipe: oneDNN ${dnnl_VERSION} (${dnnl_DIR}): the kernel seam's onednn implementation is built")
  else()
    # A plain library path (no target): it needs no find_dependency in gpipeConfig.cmake.
    set(GPIPE_DNNL_TARGET "${GPIPE_DNNL_LIBRARY}")
    message(STATUS "gpipe: oneDNN ${GPIPE_DNNL_LIBRARY} (no CMake package): the onednn implementation is built")
  endif()
else()
  message(STATUS "gpipe: oneDNN not used (GPIPE_ENABLE_ONEDNN=OFF): the kernel seam has the portable implementation only")
endif()

# cuBLAS / cuBLASLt (CUDA builds): an implementation of the kernel seam
# (src/kernels/*_cublas.cpp). On by default when the Kokkos install has the
# CUDA backend and CMake's CUDAToolkit (with cuBLAS and cuBLASLt) is found;
# never on another backend (the implementation runs on device memory only).
set(_gpipe_cublas_found OFF)
if(Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
    set(_gpipe_cublas_found ON)
  endif()
endif()
option(GPIPE_ENABLE_CUBLAS "Build the cuBLAS/cuBLASLt implementation of the kernel seam (Kokkos CUDA backend)"
       ${_gpipe_cublas_found})
if(GPIPE_ENABLE_CUBLAS)
  if(NOT _gpipe_cublas_found)
    message(FATAL_ERROR "gpipe: GPIPE_ENABLE_CUBLAS=ON needs a Kokkos built with Kokkos_ENABLE_CUDA=ON and "
                        "CUDAToolkit with cuBLAS and cuBLASLt (set CUDAToolkit_ROOT); or configure with "
                        "-DGPIPE_ENABLE_CUBLAS=OFF")
  endif()
  message(STATUS "gpipe: cuBLAS ${CUDAToolkit_VERSION} (${CUDAToolkit_LIBRARY_DIR}): the kernel seam's cublas "
                 "implementation is built")
endif()

# cuDNN 9 (CUDA builds): the kernel seam's convolution (src/kernels/*_cudnn.cpp).
# On by default when the Kokkos install has the CUDA backend and cudnn.h and
# libcudnn are found (in the CUDA toolkit's tree, or under CUDNN_ROOT /
# $CUDNN_ROOT / $CUDNN_PATH); never on another backend (device memory only).
set(_gpipe_cudnn_found OFF)
if(Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES)
  find_package(CUDAToolkit QUIET)
  set(_gpipe_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH})
  if(CUDAToolkit_FOUND)
    list(APPEND _gpipe_cudnn_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  endif()
  find_path(GPIPE_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_gpipe_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(GPIPE_CUDNN_LIBRARY cudnn HINTS ${_gpipe_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib64 lib)
  if(CUDAToolkit_FOUND AND GPIPE_CUDNN_INCLUDE_DIR AND GPIPE_CUDNN_LIBRARY)
    file(STRINGS "${GPIPE_CUDNN_INCLUDE_DIR}/cudnn_version.h" _gpipe_cudnn_major REGEX "^#define CUDNN_MAJOR ")
    string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+).*" "\\1" _gpipe_cudnn_major "${_gpipe_cudnn_major}")
    if(_gpipe_cudnn_major GREATER_EQUAL 9)
      set(_gpipe_cudnn_found ON)
    endif()
  endif()
endif()
option(GPIPE_ENABLE_CUDNN "Build the cuDNN implementation of the kernel seam's convolution (Kokkos CUDA backend)"
       ${_gpipe_cudnn_found})
if(GPIPE_ENABLE_CUDNN)
  if(NOT _gpipe_cudnn_found)
    message(FATAL_ERROR "gpipe: GPIPE_ENABLE_CUDNN=ON needs a Kokkos built with Kokkos_ENABLE_CUDA=ON, "
                        "CUDAToolkit and cuDNN 9 or newer (cudnn.h, libcudnn; set CUDNN_ROOT); or configure "
                        "with -DGPIPE_ENABLE_CUDNN=OFF")
  endif()
  message(STATUS "gpipe: cuDNN ${_gpipe_cudnn_major} (${GPIPE_CUDNN_LIBRARY}): the kernel seam's cudnn "
                 "implementation (conv2d) is built")
endif()

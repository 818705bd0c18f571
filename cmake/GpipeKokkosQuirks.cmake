# Debian's Trilinos-packaged Kokkos 3.4 lists a non-existent include directory
# (/usr/lib/include) on Kokkos::kokkos. Point the target at Kokkos_INCLUDE_DIRS
# instead. Used by gpipe's own build and by consumers (gpipeConfig.cmake).
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

# Debian/Trilinos names Kokkos Kernels' target trilinos_kokkoskernels;
# standalone Kokkos Kernels installs Kokkos::kokkoskernels. Give both the
# standard name.
if(NOT TARGET Kokkos::kokkoskernels AND TARGET trilinos_kokkoskernels)
  add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
  set_target_properties(Kokkos::kokkoskernels PROPERTIES INTERFACE_LINK_LIBRARIES trilinos_kokkoskernels)
endif()

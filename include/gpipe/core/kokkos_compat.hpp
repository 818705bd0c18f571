#pragma once
// The one place that bridges Kokkos API differences between 3.4 and 4.x/5.x.
// Everything else in gpipe uses the API subset all three share.

#include <Kokkos_Core.hpp>

namespace gpipe::compat {

#if KOKKOS_VERSION >= 40000
#define GPIPE_KOKKOS_MATH_NS Kokkos
#else
#define GPIPE_KOKKOS_MATH_NS Kokkos::Experimental
#endif

template <class T>
KOKKOS_INLINE_FUNCTION T exp(T x) { return GPIPE_KOKKOS_MATH_NS::exp(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T log(T x) { return GPIPE_KOKKOS_MATH_NS::log(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T sqrt(T x) { return GPIPE_KOKKOS_MATH_NS::sqrt(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T tanh(T x) { return GPIPE_KOKKOS_MATH_NS::tanh(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T pow(T x, T y) { return GPIPE_KOKKOS_MATH_NS::pow(x, y); }

#undef GPIPE_KOKKOS_MATH_NS

/// Host memory for staging device data to MPI or files: page-locked where
/// the backend has it (CUDA, HIP, SYCL: faster, asynchronous copies),
/// ordinary host memory otherwise and on Kokkos 3.4.
#if KOKKOS_VERSION >= 40000
using HostPinnedSpace = Kokkos::SharedHostPinnedSpace;
#else
using HostPinnedSpace = Kokkos::HostSpace;
#endif

/// Fence the default execution space; `label` shows in Kokkos Tools on 4.x.
inline void fence(const char* label) {
#if KOKKOS_VERSION >= 40000
  Kokkos::fence(label);
#else
  (void)label;
  Kokkos::fence();
#endif
}

/// Fence one execution-space instance (waits for the work submitted to it
/// only, not for other instances' or the host program's own work).
template <class Space>
inline void fence(const Space& space, const char* label) {
#if KOKKOS_VERSION >= 40000
  space.fence(label);
#else
  (void)label;
  space.fence();
#endif
}

}  // namespace gpipe::compat

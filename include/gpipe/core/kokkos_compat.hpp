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

/// Fence the default execution space; `label` shows in Kokkos Tools on 4.x.
inline void fence(const char* label) {
#if KOKKOS_VERSION >= 40000
  Kokkos::fence(label);
#else
  (void)label;
  Kokkos::fence();
#endif
}

}  // namespace gpipe::compat

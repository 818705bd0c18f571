#pragma once
// Internal: KokkosBlas::gemm on an execution-space instance where Kokkos
// Kernels has that overload (4.1 and later); Kokkos Kernels 3.4 has none,
// and there the call runs on the default instance (Debian's Serial build,
// where every instance is the same synchronous one). Row-major (LayoutRight)
// A, B, C as everywhere in gpipe. Used by the portable implementation only
// (gemm_portable.cpp); layers call gpipe/kernels/gemm.hpp.

#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>

#include "gpipe/core/views.hpp"

namespace gpipe::detail {

template <class A, class B, class C>
void gemm(const ExecSpace& space, const char* ta, const char* tb, typename C::const_value_type alpha,
          const A& a, const B& b, typename C::const_value_type beta, const C& c) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40100
  KokkosBlas::gemm(space, ta, tb, alpha, a, b, beta, c);
#else
  (void)space;
  KokkosBlas::gemm(ta, tb, alpha, a, b, beta, c);
#endif
}

}  // namespace gpipe::detail

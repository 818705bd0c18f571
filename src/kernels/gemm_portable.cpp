// Portable GEMM implementation of the kernel seam: KokkosBlas::gemm (its
// TPL, OpenBLAS here, where Kokkos Kernels has one) for the dense GEMMs and
// KokkosBatched team GEMMs, one team per matrix in one launch, for the
// strided-batched GEMM.
#include <KokkosBatched_Gemm_Decl.hpp>

#include "gpipe/core/precision.hpp"
#include "implementations.hpp"
#include "kokkos_blas.hpp"

namespace gpipe::kernels::portable {

namespace {
const char* op(Op o) { return o == Op::transpose ? "T" : "N"; }

template <class T>
using StridedView = Kokkos::View<T**, Kokkos::LayoutStride, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
KOKKOS_INLINE_FUNCTION StridedView<T> strided(T* base, const Strided& s, std::int64_t o, std::int64_t i) {
  return StridedView<T>(base + o * s.outer_stride + i * s.inner_stride,
                        Kokkos::LayoutStride(size_t(s.rows), size_t(s.ld), size_t(s.cols), 1));
}

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;

template <class TA, class TB, class T>
void batched(const ExecSpace& space, std::int64_t outer, std::int64_t inner, T alpha, const T* a,
             const Strided& sa, const T* b, const Strided& sb, T beta, T* c, const Strided& sc) {
  using Gemm = KokkosBatched::TeamGemm<TeamMember, TA, TB, KokkosBatched::Algo::Gemm::Unblocked>;
  Kokkos::parallel_for(
      "gpipe::kernels::batched_gemm", TeamPolicy(space, outer * inner, Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t o = team.league_rank() / inner, i = team.league_rank() % inner;
        Gemm::invoke(team, alpha, strided(a, sa, o, i), strided(b, sb, o, i), beta, strided(c, sc, o, i));
      });
}
}  // namespace

template <class T>
void gemm(const ExecSpace& space, Op ta, Op tb, T alpha, ConstMatrix<T> a, ConstMatrix<T> b, T beta,
          Matrix<T> c) {
  detail::gemm(space, op(ta), op(tb), alpha, a, b, beta, c);
}

template <class T>
void gemm_bias(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias, Matrix<T> y) {
  const std::int64_t out = std::int64_t(y.extent(1));
  Kokkos::parallel_for(
      "gpipe::kernels::gemm_bias::fill", RowPolicy(space, std::int64_t(y.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t i = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, out), [&](const std::int64_t j) { y(i, j) = bias(0, j); });
      });
  detail::gemm(space, "N", "N", T(1), x, w, T(1), y);
}

template <class T>
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc) {
  using N = KokkosBatched::Trans::NoTranspose;
  using Tr = KokkosBatched::Trans::Transpose;
  if (ta == Op::none && tb == Op::none) batched<N, N>(space, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  else if (ta == Op::none) batched<N, Tr>(space, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  else if (tb == Op::none) batched<Tr, N>(space, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  else batched<Tr, Tr>(space, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
}

#define GPIPE_INSTANTIATE(T)                                                                                 \
  template void gemm<T>(const ExecSpace&, Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>);         \
  template void gemm_bias<T>(const ExecSpace&, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, Matrix<T>); \
  template void batched_gemm<T>(const ExecSpace&, Op, Op, std::int64_t, std::int64_t, T, const T*,          \
                                const Strided&, const T*, const Strided&, T, T*, const Strided&);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels::portable

#include "gpipe/core/finite.hpp"
#include "gpipe/core/precision.hpp"

#include <limits>

namespace gpipe {

// Blocks of kBlock values: each block first ORs a branch-free test over
// all its values (a loop the compiler vectorizes), and only a block with a
// non-finite value looks for the first one. The reduction's Min over
// blocks is then the first index overall, as one element-wise Min was
// (that ran a compare-and-branch per value: about 5 % of a bf16 deep-MLP
// step on the AMD EPYC; perf/README.md, "Issue 22: the bf16 route rule").
template <class T>
std::int64_t first_nonfinite(const Vector<T>& v, const ExecSpace& space) {
  constexpr std::int64_t kBlock = 512;
  const auto n = std::int64_t(v.extent(0));
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const T* p = v.data();
  std::int64_t first = n;
  Kokkos::parallel_reduce(
      "gpipe::first_nonfinite", Kokkos::RangePolicy<ExecSpace>(space, 0, blocks),
      KOKKOS_LAMBDA(const std::int64_t b, std::int64_t& min) {
        const std::int64_t begin = b * kBlock, end = begin + kBlock < n ? begin + kBlock : n;
        int bad = 0;
        // x - x is 0 for finite x and NaN for NaN and +-inf.
        for (std::int64_t i = begin; i < end; ++i) bad |= int(!(p[i] - p[i] == T(0)));
        if (bad == 0) return;
        for (std::int64_t i = begin; i < end; ++i)
          if (!(p[i] - p[i] == T(0))) {
            if (i < min) min = i;
            return;
          }
      },
      Kokkos::Min<std::int64_t>(first));
  return first < n ? first : -1;
}

#define GPIPE_INSTANTIATE(T) \
  template std::int64_t first_nonfinite<T>(const Vector<T>&, const ExecSpace&);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

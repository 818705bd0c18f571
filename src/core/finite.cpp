#include "gpipe/core/finite.hpp"
#include "gpipe/core/precision.hpp"

#include <limits>

namespace gpipe {

template <class T>
std::int64_t first_nonfinite(const Vector<T>& v, const ExecSpace& space) {
  const auto n = std::int64_t(v.extent(0));
  std::int64_t first = n;
  Kokkos::parallel_reduce(
      "gpipe::first_nonfinite", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& min) {
        const T x = v(i);
        // x - x is 0 for finite x and NaN for NaN and +-inf.
        if (!(x - x == T(0)) && i < min) min = i;
      },
      Kokkos::Min<std::int64_t>(first));
  return first < n ? first : -1;
}

#define GPIPE_INSTANTIATE(T) \
  template std::int64_t first_nonfinite<T>(const Vector<T>&, const ExecSpace&);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

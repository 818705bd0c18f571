// fp32 <-> bf16 conversions of the kernel seam (convert.hpp): oneDNN's
// reorder on the native bf16 route, else the portable loop.
#include "gpipe/kernels/convert.hpp"

#include "gpipe/config.hpp"
#include "gpipe/kernels/backend.hpp"
#include "implementations.hpp"

namespace gpipe::kernels {

namespace {
// Values per work item: on host spaces a block of 512 consecutive values, a
// plain loop that the compiler vectorizes; on device spaces one value per
// thread (coalesced). The same values either way: each is converted alone.
constexpr std::int64_t kBlock = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible ? 512 : 1;

template <class F>
void for_each_value(const char* label, const ExecSpace& space, std::int64_t n, const F& f) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, blocks), KOKKOS_LAMBDA(const std::int64_t b) {
        const std::int64_t begin = b * kBlock, end = begin + kBlock < n ? begin + kBlock : n;
        for (std::int64_t i = begin; i < end; ++i) f(i);
      });
}
}  // namespace

bool onednn_converts() {
#ifdef GPIPE_ENABLE_ONEDNN
  return implementation(Primitive::gemm, 2) == Implementation::onednn;
#else
  return false;
#endif
}

void to_bf16(const ExecSpace& space, const float* src, std::int64_t n, bf16* dst) {
  if (n <= 0) return;
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_converts()) return onednn::to_bf16(space, src, n, dst);
#endif
  for_each_value("gpipe::kernels::to_bf16", space, n, KOKKOS_LAMBDA(const std::int64_t i) { dst[i] = bf16(src[i]); });
}

void from_bf16(const ExecSpace& space, const bf16* src, std::int64_t n, float* dst) {
  if (n <= 0) return;
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_converts()) return onednn::from_bf16(space, src, n, dst);
#endif
  for_each_value("gpipe::kernels::from_bf16", space, n, KOKKOS_LAMBDA(const std::int64_t i) { dst[i] = float(src[i]); });
}

void round_to_bf16(const ExecSpace& space, float* values, std::int64_t n) {
  if (n <= 0) return;
#ifdef GPIPE_ENABLE_ONEDNN
  if (onednn_converts()) return onednn::round_bf16(space, values, n);
#endif
  for_each_value("gpipe::kernels::round_to_bf16", space, n,
                 KOKKOS_LAMBDA(const std::int64_t i) { values[i] = float(bf16(values[i])); });
}

}  // namespace gpipe::kernels

// Boundary messages' wire format (gpipe/pipeline/wire_format.hpp).
#include "gpipe/pipeline/wire_format.hpp"

#include <atomic>
#include <stdexcept>

#include "gpipe/core/half.hpp"
#include "gpipe/kernels/convert.hpp"

namespace gpipe {

namespace {
std::atomic<std::int64_t> sent{0};

// Values per work item: on host spaces a block of 512 consecutive values, a
// plain loop over raw pointers that the compiler vectorizes (one value per
// work item through Views compiled to a scalar loop: these passes were 25 %
// of a bf16 CNN step on the Intel Xeon with AMX, perf/README.md "Issue 22:
// the CNN's bf16 step on AMX"); on device spaces one value per thread, as
// before (coalesced). The same values either way: each is converted alone.
constexpr std::int64_t kBlock = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible ? 512 : 1;

// f(i) for i < n, in blocks of kBlock values.
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

void pack_wire(const ExecSpace& space, Format format, const float* src, std::int64_t n, std::uint16_t* dst) {
  const float* s = src;
  std::uint16_t* d = dst;
  if (format == Format::bf16)  // the seam's conversion (kernels/convert.hpp), as every bf16 value of the run
    kernels::to_bf16(space, s, n, reinterpret_cast<bf16*>(d));
  else if (format == Format::fp16)
    for_each_value("gpipe::BoundaryBuffer::pack_fp16", space, n, KOKKOS_LAMBDA(const std::int64_t i) {
      d[i] = detail::float_to_fp16_bits(s[i]);
    });
  else
    throw std::invalid_argument(std::string("gpipe::pack_wire: ") + name(format) + " is not a 16-bit wire format");
}

void unpack_wire(const ExecSpace& space, Format format, const std::uint16_t* src, std::int64_t n, float* dst) {
  const std::uint16_t* s = src;
  float* d = dst;
  if (format == Format::bf16)
    kernels::from_bf16(space, reinterpret_cast<const bf16*>(s), n, d);
  else if (format == Format::fp16)
    for_each_value("gpipe::BoundaryBuffer::unpack_fp16", space, n, KOKKOS_LAMBDA(const std::int64_t i) {
      d[i] = detail::fp16_bits_to_float(s[i]);
    });
  else
    throw std::invalid_argument(std::string("gpipe::unpack_wire: ") + name(format) +
                                " is not a 16-bit wire format");
}

void round_activations(const ExecSpace& space, Format format, float* values, std::int64_t n) {
  float* v = values;
  if (format == Format::bf16)
    kernels::round_to_bf16(space, v, n);
  else if (format == Format::fp16)
    for_each_value("gpipe::Cell::round_fp16", space, n, KOKKOS_LAMBDA(const std::int64_t i) {
      v[i] = detail::fp16_bits_to_float(detail::float_to_fp16_bits(v[i]));
    });
}

void round_and_pack_wire(const ExecSpace& space, Format format, float* values, std::int64_t n, std::uint16_t* dst) {
  float* v = values;
  std::uint16_t* d = dst;
  if (format == Format::bf16 && kernels::onednn_converts()) {  // two passes of oneDNN's reorder
    kernels::to_bf16(space, v, n, reinterpret_cast<bf16*>(d));
    kernels::from_bf16(space, reinterpret_cast<const bf16*>(d), n, v);
  } else if (format == Format::bf16)
    for_each_value("gpipe::Cell::round_pack_bf16", space, n, KOKKOS_LAMBDA(const std::int64_t i) {
          const std::uint16_t h = detail::float_to_bf16_bits(v[i]);
          d[i] = h;
          v[i] = detail::bf16_bits_to_float(h);
        });
  else if (format == Format::fp16)
    for_each_value("gpipe::Cell::round_pack_fp16", space, n, KOKKOS_LAMBDA(const std::int64_t i) {
          const std::uint16_t h = detail::float_to_fp16_bits(v[i]);
          d[i] = h;
          v[i] = detail::fp16_bits_to_float(h);
        });
  else
    throw std::invalid_argument(std::string("gpipe::round_and_pack_wire: ") + name(format) +
                                " is not a 16-bit wire format");
}

std::int64_t boundary_bytes_sent() { return sent.load(); }

void count_boundary_bytes(std::int64_t bytes) { sent += bytes; }

}  // namespace gpipe

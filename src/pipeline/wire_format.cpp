// Boundary messages' wire format (gpipe/pipeline/wire_format.hpp).
#include "gpipe/pipeline/wire_format.hpp"

#include <atomic>
#include <stdexcept>

#include "gpipe/core/half.hpp"

namespace gpipe {

namespace {
template <class V>
using Unmanaged = Kokkos::View<V*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
std::atomic<std::int64_t> sent{0};
}  // namespace

void pack_wire(const ExecSpace& space, Format format, const float* src, std::int64_t n, std::uint16_t* dst) {
  const Unmanaged<const float> s(src, size_t(n));
  const Unmanaged<std::uint16_t> d(dst, size_t(n));
  if (format == Format::bf16)
    Kokkos::parallel_for(
        "gpipe::BoundaryBuffer::pack_bf16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { d(i) = detail::float_to_bf16_bits(s(i)); });
  else if (format == Format::fp16)
    Kokkos::parallel_for(
        "gpipe::BoundaryBuffer::pack_fp16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { d(i) = detail::float_to_fp16_bits(s(i)); });
  else
    throw std::invalid_argument(std::string("gpipe::pack_wire: ") + name(format) + " is not a 16-bit wire format");
}

void unpack_wire(const ExecSpace& space, Format format, const std::uint16_t* src, std::int64_t n, float* dst) {
  const Unmanaged<const std::uint16_t> s(src, size_t(n));
  const Unmanaged<float> d(dst, size_t(n));
  if (format == Format::bf16)
    Kokkos::parallel_for(
        "gpipe::BoundaryBuffer::unpack_bf16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { d(i) = detail::bf16_bits_to_float(s(i)); });
  else if (format == Format::fp16)
    Kokkos::parallel_for(
        "gpipe::BoundaryBuffer::unpack_fp16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { d(i) = detail::fp16_bits_to_float(s(i)); });
  else
    throw std::invalid_argument(std::string("gpipe::unpack_wire: ") + name(format) +
                                " is not a 16-bit wire format");
}

void round_activations(const ExecSpace& space, Format format, float* values, std::int64_t n) {
  const Unmanaged<float> v(values, size_t(n));
  if (format == Format::bf16)
    Kokkos::parallel_for(
        "gpipe::Cell::round_bf16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { v(i) = detail::bf16_bits_to_float(detail::float_to_bf16_bits(v(i))); });
  else if (format == Format::fp16)
    Kokkos::parallel_for(
        "gpipe::Cell::round_fp16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { v(i) = detail::fp16_bits_to_float(detail::float_to_fp16_bits(v(i))); });
}

void round_and_pack_wire(const ExecSpace& space, Format format, float* values, std::int64_t n, std::uint16_t* dst) {
  const Unmanaged<float> v(values, size_t(n));
  const Unmanaged<std::uint16_t> d(dst, size_t(n));
  if (format == Format::bf16)
    Kokkos::parallel_for(
        "gpipe::Cell::round_pack_bf16", Kokkos::RangePolicy<ExecSpace>(space, 0, n), KOKKOS_LAMBDA(const std::int64_t i) {
          const std::uint16_t h = detail::float_to_bf16_bits(v(i));
          d(i) = h;
          v(i) = detail::bf16_bits_to_float(h);
        });
  else if (format == Format::fp16)
    Kokkos::parallel_for(
        "gpipe::Cell::round_pack_fp16", Kokkos::RangePolicy<ExecSpace>(space, 0, n), KOKKOS_LAMBDA(const std::int64_t i) {
          const std::uint16_t h = detail::float_to_fp16_bits(v(i));
          d(i) = h;
          v(i) = detail::fp16_bits_to_float(h);
        });
  else
    throw std::invalid_argument(std::string("gpipe::round_and_pack_wire: ") + name(format) +
                                " is not a 16-bit wire format");
}

std::int64_t boundary_bytes_sent() { return sent.load(); }

void count_boundary_bytes(std::int64_t bytes) { sent += bytes; }

}  // namespace gpipe

#pragma once
// 16-bit floating-point storage types that are 16 bits on every backend.
//
// Kokkos' Kokkos::Experimental::half_t / bhalf_t are plain `float` on host
// backends (and Debian's Kokkos 3.4 has neither on the host), so a CPU build
// that used them would never store, round or send a 16-bit value, and its
// tests would not exercise reduced precision at all. gpipe::bf16 and
// gpipe::fp16 are 2-byte trivially copyable structs holding the IEEE bit
// pattern; every conversion runs in a KOKKOS_INLINE_FUNCTION, so the same code
// converts in a host kernel, a CUDA/HIP kernel and on the host.
//
// Formats:
//   bf16 (bfloat16, "brain float"): 1 sign, 8 exponent, 7 mantissa bits; the
//        upper half of an IEEE-754 binary32. Range as float, epsilon 2^-7.
//   fp16 (IEEE-754 binary16): 1 sign, 5 exponent (bias 15), 10 mantissa bits;
//        largest finite 65504, smallest normal 2^-14, smallest subnormal
//        2^-24, epsilon 2^-10.
// Conversion from float rounds to nearest, ties to even (IEEE-754's default
// rounding), with gradual underflow to subnormals and zero, overflow to
// +/-infinity, infinities kept, and every NaN mapped to a quiet NaN of the same
// sign (the payload's top bits kept where they fit). Conversion to float is
// exact. Arithmetic is done by converting to float: these are storage types.

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace gpipe {

namespace detail {

KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}

KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

/// binary32 -> bfloat16 bits, round to nearest even. Branch-free (both
/// results computed, one selected), so loops over it vectorize.
KOKKOS_INLINE_FUNCTION std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t nan = (u >> 16) | 0x0040u;                  // quiet NaN
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // ties to even; carries into the exponent (overflow -> inf)
  return std::uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

KOKKOS_INLINE_FUNCTION float bf16_bits_to_float(std::uint16_t h) {
  return bits_float(std::uint32_t(h) << 16);
}

/// binary32 -> binary16 bits, round to nearest even, with subnormals.
KOKKOS_INLINE_FUNCTION std::uint16_t float_to_fp16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u | ((a >> 13) & 0x03ffu));  // quiet NaN
  if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // >= 65520 (or inf): rounds to inf
  if (a < 0x38800000u) {                                      // below 2^-14: subnormal or zero
    const std::uint32_t e = a >> 23;                          // biased float exponent
    if (e < 102u) return std::uint16_t(sign);                 // below 2^-25: rounds to zero
    const std::uint32_t m = (a & 0x007fffffu) | 0x00800000u;  // 24-bit significand
    const std::uint32_t shift = 126u - e;                     // m / 2^shift: the value in units of 2^-24
    std::uint32_t h = m >> shift;
    const std::uint32_t rest = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (h & 1u))) ++h;  // may carry into the smallest normal
    return std::uint16_t(sign | h);
  }
  std::uint32_t h = (a - 0x38000000u) >> 13;  // rebias 127 -> 15, drop 13 mantissa bits
  const std::uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return std::uint16_t(sign | h);
}

KOKKOS_INLINE_FUNCTION float fp16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x03ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));  // inf / NaN
  if (e == 0u) {                                                       // zero / subnormal: m * 2^-24
    const float v = float(m) * 5.9604644775390625e-08f;                // exact (m < 2^10)
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail

/// bfloat16 storage: 2 bytes, the bit pattern in `bits`. Construct from a
/// float (rounds to nearest even) or with from_bits; converts to float exactly.
struct bf16 {
  std::uint16_t bits;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return detail::bf16_bits_to_float(bits); }
  KOKKOS_INLINE_FUNCTION static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  /// 2^-7: the gap between 1 and the next bfloat16.
  static constexpr float epsilon = 0.0078125f;
};

/// IEEE binary16 storage: 2 bytes, the bit pattern in `bits`. Construct from a
/// float (rounds to nearest even, overflow to inf, gradual underflow) or with
/// from_bits; converts to float exactly.
struct fp16 {
  std::uint16_t bits;

  fp16() = default;
  KOKKOS_INLINE_FUNCTION explicit fp16(float f) : bits(detail::float_to_fp16_bits(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return detail::fp16_bits_to_float(bits); }
  KOKKOS_INLINE_FUNCTION static fp16 from_bits(std::uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }
  /// 2^-10: the gap between 1 and the next binary16.
  static constexpr float epsilon = 0.0009765625f;
  /// Largest finite binary16.
  static constexpr float max = 65504.0f;
};

static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 must be 16 bits on every backend");
static_assert(sizeof(fp16) == 2 && alignof(fp16) == 2, "fp16 must be 16 bits on every backend");

}  // namespace gpipe

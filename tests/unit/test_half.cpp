// The 16-bit storage types (gpipe/core/half.hpp): known bit patterns, round
// to nearest even, NaN/Inf, subnormals; an independent reference (double
// arithmetic with std::nearbyint) over a million random floats; exhaustive
// round trips; conversion inside a kernel; and that a View really holds two
// bytes per value.

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpipe/core/half.hpp"
#include "gpipe/core/views.hpp"

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::uint16_t bf(std::uint32_t float_pattern) { return gpipe::bf16(from_bits(float_pattern)).bits; }
std::uint16_t hf(float f) { return gpipe::fp16(f).bits; }

// Round-to-nearest-even encoding of a finite float into a format with
// `mantissa` stored bits, minimum normal exponent `emin`, maximum exponent
// `emax`, computed in double (exact for every float) with std::nearbyint.
std::uint16_t reference_encode(float f, int mantissa, int emin, int emax) {
  const std::uint16_t sign = std::signbit(f) ? std::uint16_t(0x8000) : std::uint16_t(0);
  const std::uint16_t inf = std::uint16_t(((emax - emin + 2) << mantissa));  // exponent field all ones
  const double a = std::fabs(double(f));
  if (std::isinf(f)) return std::uint16_t(sign | inf);
  if (a == 0.0) return sign;
  int ex = 0;
  std::frexp(a, &ex);
  int e = ex - 1;  // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;
  double q = std::nearbyint(std::ldexp(a, mantissa - e));  // ties to even
  if (q == std::ldexp(1.0, mantissa + 1)) {
    q = std::ldexp(1.0, mantissa);
    ++e;
  }
  if (e > emax) return std::uint16_t(sign | inf);
  const auto qi = std::uint32_t(q);
  if (qi < (1u << mantissa)) return std::uint16_t(sign | qi);  // subnormal (e == emin)
  return std::uint16_t(sign | (std::uint32_t(e - emin + 1) << mantissa) | (qi - (1u << mantissa)));
}

bool is_nan16(std::uint16_t bits, int mantissa) {
  const std::uint32_t exp_all = ((1u << (15 - mantissa)) - 1u) << mantissa;
  return (bits & exp_all) == exp_all && (bits & ((1u << mantissa) - 1u)) != 0;
}

bool is_quiet16(std::uint16_t bits, int mantissa) { return (bits >> (mantissa - 1)) & 1u; }

}  // namespace

TEST(Half, StorageIsTwoBytesInAView) {
  static_assert(sizeof(gpipe::bf16) == 2 && sizeof(gpipe::fp16) == 2);
  Kokkos::View<gpipe::bf16*, gpipe::MemSpace> b("b", 1000);
  Kokkos::View<gpipe::fp16*, gpipe::MemSpace> h("h", 1000);
  EXPECT_EQ(b.span() * sizeof(decltype(b)::value_type), 2000u);
  EXPECT_EQ(h.span() * sizeof(decltype(h)::value_type), 2000u);
  EXPECT_EQ(reinterpret_cast<const char*>(b.data() + 1) - reinterpret_cast<const char*>(b.data()), 2);
}

TEST(Half, Bf16KnownPatterns) {
  EXPECT_EQ(bf(0x3f800000u), 0x3f80);  // 1
  EXPECT_EQ(bf(0xc0000000u), 0xc000);  // -2
  EXPECT_EQ(bf(0x40490fdbu), 0x4049);  // pi rounds down
  EXPECT_EQ(bf(0x3f808000u), 0x3f80);  // tie, even below
  EXPECT_EQ(bf(0x3f818000u), 0x3f82);  // tie, even above
  EXPECT_EQ(bf(0x3f808001u), 0x3f81);  // just above the tie
  EXPECT_EQ(bf(0x3f807fffu), 0x3f80);  // just below the tie
  EXPECT_EQ(bf(0x7f7fffffu), 0x7f80);  // largest float overflows to inf
  EXPECT_EQ(bf(0x7f7f7fffu), 0x7f7f);  // ... but the largest bf16 below it stays
  EXPECT_EQ(bf(0x7f800000u), 0x7f80);  // +inf
  EXPECT_EQ(bf(0xff800000u), 0xff80);  // -inf
  EXPECT_EQ(bf(0x80000000u), 0x8000);  // -0 keeps its sign
  EXPECT_EQ(bf(0x00000001u), 0x0000);  // smallest float subnormal rounds to 0
  EXPECT_EQ(bf(0x00008000u), 0x0000);  // tie at 2^-134: to even (0)
  EXPECT_EQ(bf(0x00018000u), 0x0002);  // tie between subnormals 1 and 2: to 2
  EXPECT_EQ(bf(0x007fffffu), 0x0080);  // largest float subnormal rounds up to the smallest normal
  EXPECT_EQ(bf(0x7fc00000u), 0x7fc0);  // quiet NaN
  EXPECT_EQ(bf(0xffc00001u), 0xffc0);  // negative NaN keeps its sign
  EXPECT_EQ(bf(0x7f800001u), 0x7fc0);  // signalling NaN with a low payload stays a (quiet) NaN
  EXPECT_EQ(to_bits(float(gpipe::bf16::from_bits(0x0001))), 0x00010000u);  // bf16 subnormal, exact
  EXPECT_EQ(float(gpipe::bf16::from_bits(0x4049)), 3.140625f);
}

TEST(Half, Fp16KnownPatterns) {
  EXPECT_EQ(hf(1.0f), 0x3c00);
  EXPECT_EQ(hf(-2.0f), 0xc000);
  EXPECT_EQ(hf(65504.0f), 0x7bff);                       // largest finite
  EXPECT_EQ(hf(65519.0f), 0x7bff);                       // below the tie to 65536
  EXPECT_EQ(hf(65520.0f), 0x7c00);                       // the tie: to even, which is inf
  EXPECT_EQ(hf(1e10f), 0x7c00);
  EXPECT_EQ(hf(-INFINITY), 0xfc00);
  EXPECT_EQ(hf(-0.0f), 0x8000);
  EXPECT_EQ(hf(std::ldexp(1.0f, -14)), 0x0400);          // smallest normal
  EXPECT_EQ(hf(std::ldexp(1.0f, -24)), 0x0001);          // smallest subnormal
  EXPECT_EQ(hf(std::ldexp(1.0f, -25)), 0x0000);          // tie between 0 and 2^-24: to 0
  EXPECT_EQ(hf(std::ldexp(3.0f, -26)), 0x0001);          // 0.75 * 2^-24: up
  EXPECT_EQ(hf(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 * 2^-24: tie, to 2
  EXPECT_EQ(hf(std::ldexp(5.0f, -25)), 0x0002);          // 2.5 * 2^-24: tie, to 2
  EXPECT_EQ(hf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);  // subnormal rounds into the smallest normal
  EXPECT_EQ(hf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);   // tie, even below
  EXPECT_EQ(hf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);   // tie, even above
  EXPECT_EQ(hf(0.1f), 0x2e66);
  EXPECT_EQ(hf(NAN), 0x7e00);
  EXPECT_EQ(hf(from_bits(0x7f802000u)), 0x7e01);         // signalling NaN: quieted, payload kept
  EXPECT_EQ(hf(from_bits(0x7f800001u)), 0x7e00);         // payload below fp16's bits: still NaN
  EXPECT_EQ(float(gpipe::fp16::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(float(gpipe::fp16::from_bits(0x83ff)), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(float(gpipe::fp16::from_bits(0x7bff)), 65504.0f);
  EXPECT_TRUE(std::isinf(float(gpipe::fp16::from_bits(0xfc00))));
  EXPECT_TRUE(std::isnan(float(gpipe::fp16::from_bits(0x7c01))));
}

TEST(Half, MatchesAnIndependentReferenceOnRandomFloats) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::mt19937 gen(12345);
  std::uniform_int_distribution<std::uint32_t> bits;
  long checked = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float f = from_bits(bits(gen));
    const std::uint16_t b = gpipe::bf16(f).bits, h = gpipe::fp16(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan16(b, 7) && is_quiet16(b, 7)) << std::hex << to_bits(f);
      ASSERT_TRUE(is_nan16(h, 10) && is_quiet16(h, 10)) << std::hex << to_bits(f);
      ASSERT_EQ(b >> 15, to_bits(f) >> 31);
      ASSERT_EQ(h >> 15, to_bits(f) >> 31);
      continue;
    }
    ASSERT_EQ(b, reference_encode(f, 7, -126, 127)) << std::hex << to_bits(f);
    ASSERT_EQ(h, reference_encode(f, 10, -14, 15)) << std::hex << to_bits(f);
    ++checked;
  }
  EXPECT_GT(checked, 990000);
  // Random bit patterns are mostly far outside fp16's range: check its own
  // range densely too (every exponent from subnormal to overflow).
  std::uniform_real_distribution<float> unit(1.0f, 2.0f);
  for (int e = -27; e <= 16; ++e) {
    for (int i = 0; i < 5000; ++i) {
      const float f = std::ldexp(unit(gen), e) * (i % 2 ? -1.0f : 1.0f);
      ASSERT_EQ(gpipe::fp16(f).bits, reference_encode(f, 10, -14, 15)) << f;
    }
  }
}

TEST(Half, EveryPatternRoundTripsExactly) {
  for (std::uint32_t p = 0; p < 0x10000u; ++p) {
    const auto bits = std::uint16_t(p);
    const float b = gpipe::bf16::from_bits(bits), h = gpipe::fp16::from_bits(bits);
    if (is_nan16(bits, 7)) {
      EXPECT_TRUE(std::isnan(b));
    } else {
      ASSERT_EQ(gpipe::bf16(b).bits, bits) << std::hex << p;
    }
    if (is_nan16(bits, 10)) {
      EXPECT_TRUE(std::isnan(h));
    } else {
      ASSERT_EQ(gpipe::fp16(h).bits, bits) << std::hex << p;
    }
  }
}

// The kernel of the next test: a free function, since nvcc rejects a
// KOKKOS_LAMBDA in a TEST body (GoogleTest's TestBody is private).
void convert_on_device(const Kokkos::View<float*, gpipe::MemSpace>& x, const Kokkos::View<gpipe::bf16*, gpipe::MemSpace>& b,
                       const Kokkos::View<gpipe::fp16*, gpipe::MemSpace>& h,
                       const Kokkos::View<float*, gpipe::MemSpace>& back) {
  Kokkos::parallel_for(
      "gpipe::test::half_convert", Kokkos::RangePolicy<gpipe::ExecSpace>(gpipe::ExecSpace(), 0, int(x.extent(0))),
      KOKKOS_LAMBDA(const int i) {
        b(i) = gpipe::bf16(x(i));
        h(i) = gpipe::fp16(x(i));
        back(i) = float(b(i)) + float(h(i));
      });
}

TEST(Half, ConvertsInsideAKernelAsOnTheHost) {
  const int n = 4096;
  Kokkos::View<float*, gpipe::MemSpace> x("x", n);
  auto xh = Kokkos::create_mirror_view(x);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1000.0f);
  for (int i = 0; i < n; ++i) xh(i) = normal(gen) * std::ldexp(1.0f, (i % 60) - 40);
  Kokkos::deep_copy(x, xh);
  Kokkos::View<gpipe::bf16*, gpipe::MemSpace> b("b", n);
  Kokkos::View<gpipe::fp16*, gpipe::MemSpace> h("h", n);
  Kokkos::View<float*, gpipe::MemSpace> back("back", n);
  convert_on_device(x, b, h, back);
  auto bh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), h);
  auto backh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), back);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(bh(i).bits, gpipe::bf16(xh(i)).bits) << i;
    ASSERT_EQ(hh(i).bits, gpipe::fp16(xh(i)).bits) << i;
    ASSERT_EQ(to_bits(backh(i)), to_bits(float(gpipe::bf16(xh(i))) + float(gpipe::fp16(xh(i))))) << i;
  }
}

TEST(Half, RelativeErrorWithinHalfAnEpsilon) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = unit(gen) * 1000.0f;
    if (std::fabs(f) < 1e-3f) continue;  // fp16 subnormals have absolute, not relative, error
    EXPECT_LE(std::fabs(float(gpipe::bf16(f)) - f), 0.5f * gpipe::bf16::epsilon * std::fabs(f));
    EXPECT_LE(std::fabs(float(gpipe::fp16(f)) - f), 0.5f * gpipe::fp16::epsilon * std::fabs(f));
  }
}

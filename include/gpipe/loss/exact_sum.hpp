#pragma once
// Exact sums of doubles: the accumulator every logged metric sum uses, so a
// metric does not depend on the order its terms were added in (micro-batches,
// replicas, threads, evaluation chunks) and a logged figure is reproducible
// from its terms alone. docs/design.md, "Metric sums".
//
// Every finite double is an integer multiple of 2^-1074 below 2^1024, so a
// fixed-point integer of 2^-1074 units and 2176 bits holds any sum of up to
// 2^78 finite doubles exactly. It is kept as kExactDigits signed 64-bit words
// of radix 2^32 (word d holds units 2^(32 d - 1074)); adding a double adds its
// 53-bit significand into at most 3 words. Integer addition is associative and
// commutative, so concurrent atomic adds on a device, host adds in any order
// and an integer MPI sum over ranks all give the same words; value() then
// rounds the exact total once, to nearest, ties to even. Non-finite terms are
// counted (+inf, -inf, NaN), and value() gives what IEEE addition gives in any
// order: NaN for any NaN or for +inf with -inf, else the infinity.
// A word holds at most 2^63 / 2^32 = 2^31 un-normalized adds; normalize()
// (done by every host operation) carries, and a device accumulator is read
// (take_sums) after each run, far below that (a run adds at most a batch's
// rows per word).

#include <Kokkos_Core.hpp>

#include <array>
#include <cstdint>

namespace gpipe {

/// Radix-2^32 words of an exact sum, and the words with its non-finite counts.
inline constexpr int kExactDigits = 68;
inline constexpr int kExactWords = kExactDigits + 3;  // digits, then counts of +inf, -inf, NaN

/// Adds x exactly to the sum held in words base .. base + kExactWords - 1 of
/// `add`'s target: calls add(word, value) for each word to change (at most 3,
/// none for x = 0). On the device pass an atomic add into a View of
/// std::int64_t (exact_sum_atomic_add); host code uses ExactSum::add.
template <class Add>
KOKKOS_INLINE_FUNCTION void exact_sum_terms(double x, std::int64_t base, const Add& add) {
  union {
    double d;
    std::uint64_t u;
  } bits{x};
  const std::uint64_t u = bits.u;
  const bool negative = (u >> 63) != 0;
  const int e = int((u >> 52) & 0x7ff);
  const std::uint64_t f = u & ((std::uint64_t(1) << 52) - 1);
  if (e == 0x7ff) {  // +inf, -inf, NaN: counted
    add(base + kExactDigits + (f != 0 ? 2 : (negative ? 1 : 0)), std::int64_t(1));
    return;
  }
  if (e == 0 && f == 0) return;  // +0 and -0 add nothing
  // x = m * 2^(p - 1074), m < 2^53: a subnormal has p = 0, a normal p = e - 1.
  const std::uint64_t m = e == 0 ? f : (f | (std::uint64_t(1) << 52));
  const int p = e == 0 ? 0 : e - 1;
  const int d = p / 32, s = p % 32;
  const std::uint64_t mask = 0xffffffffull;
  const std::uint64_t lo = (m & (mask >> s)) << s;  // m's bits in word d
  const std::uint64_t rest = m >> (32 - s);          // the bits above (s = 0: m >> 32)
  const std::int64_t w[3] = {std::int64_t(lo), std::int64_t(rest & mask), std::int64_t(rest >> 32)};
  for (int k = 0; k < 3; ++k)
    if (w[k] != 0) add(base + d + k, negative ? -w[k] : w[k]);
}

/// exact_sum_terms into a View of std::int64_t with atomic adds (any thread
/// order gives the same words). Callable in kernels.
template <class Words>
KOKKOS_INLINE_FUNCTION void exact_sum_atomic_add(const Words& words, std::int64_t base, double x) {
  exact_sum_terms(x, base, [&](std::int64_t word, std::int64_t v) { Kokkos::atomic_add(&words(word), v); });
}

/// An exact sum of doubles on the host (see the file comment). Default: 0.
class ExactSum {
 public:
  ExactSum() { words_.fill(0); }
  /// The sum held in kExactWords words (a device accumulator read back, or
  /// an MPI sum of words()); normalized here.
  explicit ExactSum(const std::int64_t* words);
  /// Adds one term exactly.
  void add(double x);
  /// Adds another sum exactly.
  ExactSum& operator+=(const ExactSum& other);
  /// The sum rounded once to the nearest double (ties to even); +-inf when
  /// that rounding overflows; NaN / +-inf for non-finite terms (file
  /// comment). The same for every order of the same terms.
  double value() const;
  /// The words, normalized (digits below the top one in [0, 2^32)): equal
  /// for equal sums. For an integer MPI_SUM over ranks (MPI_INT64_T; up to
  /// 2^31 ranks), then ExactSum(words) to normalize.
  const std::array<std::int64_t, kExactWords>& words() const { return words_; }
  bool operator==(const ExactSum& other) const { return words_ == other.words_; }
  bool operator!=(const ExactSum& other) const { return !(*this == other); }

 private:
  void normalize();
  std::array<std::int64_t, kExactWords> words_;
};

}  // namespace gpipe

#include "gpipe/loss/exact_sum.hpp"

#include <cmath>
#include <limits>

namespace gpipe {

namespace {
constexpr std::int64_t kRadix = std::int64_t(1) << 32;

// Carries every digit into [0, 2^32), the top digit keeping the sign (floor
// division: exact for negative digits too).
void carry(std::int64_t* digits) {
  for (int i = 0; i + 1 < kExactDigits; ++i) {
    std::int64_t c = digits[i] / kRadix;
    if (digits[i] - c * kRadix < 0) --c;
    digits[i] -= c * kRadix;
    digits[i + 1] += c;
  }
}
}  // namespace

ExactSum::ExactSum(const std::int64_t* words) {
  for (int i = 0; i < kExactWords; ++i) words_[size_t(i)] = words[i];
  normalize();
}

void ExactSum::normalize() { carry(words_.data()); }

namespace {
// The host accumulator's add for exact_sum_terms. A functor callable on host
// and device (it only ever runs on the host): exact_sum_terms is
// KOKKOS_INLINE_FUNCTION, and nvcc warns (#20013-D) when such a function is
// instantiated with a host-only lambda, whose device version would call a
// host function.
struct HostWords {
  std::int64_t* words;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t word, std::int64_t v) const { words[word] += v; }
};
}  // namespace

void ExactSum::add(double x) {
  exact_sum_terms(x, 0, HostWords{words_.data()});
  normalize();
}

ExactSum& ExactSum::operator+=(const ExactSum& other) {
  for (int i = 0; i < kExactWords; ++i) words_[size_t(i)] += other.words_[size_t(i)];
  normalize();
  return *this;
}

double ExactSum::value() const {
  const std::int64_t pinf = words_[kExactDigits], ninf = words_[kExactDigits + 1],
                     nan = words_[kExactDigits + 2];
  if (nan > 0 || (pinf > 0 && ninf > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (pinf > 0) return std::numeric_limits<double>::infinity();
  if (ninf > 0) return -std::numeric_limits<double>::infinity();
  // The magnitude (a negative sum negated digit by digit, carried again).
  std::array<std::int64_t, kExactDigits> a{};
  const bool negative = words_[kExactDigits - 1] < 0;
  for (int i = 0; i < kExactDigits; ++i) a[size_t(i)] = negative ? -words_[size_t(i)] : words_[size_t(i)];
  if (negative) carry(a.data());
  int top = kExactDigits - 1;
  while (top >= 0 && a[size_t(top)] == 0) --top;
  if (top < 0) return 0.0;
  auto bit = [&a](int i) { return (a[size_t(i / 32)] >> (i % 32)) & 1; };
  int high = 32 * top + 31;  // the highest set bit (units of 2^-1074)
  while (bit(high) == 0) --high;
  double result;
  if (high < 53) {  // below 2^53 units: exactly a double (subnormal or normal)
    const std::int64_t k = a[0] + (top >= 1 ? a[1] * kRadix : 0);
    result = std::ldexp(double(k), -1074);
  } else {  // 53 bits from the highest, rounded to nearest, ties to even
    std::uint64_t mantissa = 0;
    for (int i = high; i > high - 53; --i) mantissa = (mantissa << 1) | std::uint64_t(bit(i));
    const int low = high - 52;  // the mantissa's lowest bit
    const bool half = bit(low - 1) != 0;
    bool sticky = false;
    for (int i = 0; i < low - 1 && !sticky; ++i) sticky = bit(i) != 0;
    if (half && (sticky || (mantissa & 1))) ++mantissa;  // 2^53 is still exact
    result = std::ldexp(double(mantissa), low - 1074);    // +inf past the largest double
  }
  return negative ? -result : result;
}

}  // namespace gpipe

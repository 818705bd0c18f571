// The losses keep their sums on the device (gpipe/loss/loss.hpp):
// accumulate() per micro-batch launches kernels and never fences or copies
// to the host; take_sums() fences once and returns the totals, bitwise the
// sums the host formed when it read every micro-batch on its own (0 + s_1 +
// s_2 + ... in call order). Checked for every loss kind: softmax and token
// cross-entropy, mse (with its moments), huber; plus the bad-label report
// at take_sums() and the reset after it. (Fences are counted through Kokkos
// Tools where Kokkos reports them: 4.x; 3.4 reports none.)

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/memory.hpp"
#include "gpipe/loss/exact_sum.hpp"
#include "gpipe/loss/loss.hpp"

namespace gpipe {
namespace {

int fences = 0, copies = 0;
void on_fence(const char*, std::uint32_t, std::uint64_t*) { ++fences; }
void on_copy(Kokkos::Profiling::SpaceHandle, const char*, const void*, Kokkos::Profiling::SpaceHandle,
             const char*, const void*, std::uint64_t) {
  ++copies;
}

// Counts fences and deep copies while alive.
struct Listen {
  Listen() {
    fences = copies = 0;
    Kokkos::Tools::Experimental::set_begin_fence_callback(on_fence);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(on_copy);
  }
  ~Listen() {
    Kokkos::Tools::Experimental::set_begin_fence_callback(nullptr);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(nullptr);
  }
};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Batch {
  Matrix<double> outputs;
  Targets<double> targets;
  Matrix<double> grads;
};

// M micro-batches of `rows` rows of `width` outputs; labels in [0, classes)
// (classification) or float targets (regression).
std::vector<Batch> batches(const LossSpec& spec, int M, std::int64_t rows, std::int64_t width, int per_row) {
  std::vector<Batch> out;
  const std::int64_t classes = width / per_row;
  for (int m = 0; m < M; ++m) {
    Batch b;
    b.outputs = test::to_device(test::uniform(size_t(rows * width), 11 + m, -3, 3), rows, width);
    b.grads = Matrix<double>("g", rows, width);
    if (spec.regression()) {
      b.targets = Targets<double>(ConstMatrix<double>(test::to_device(test::uniform(size_t(rows * width), 31 + m), rows, width)));
    } else {
      std::vector<std::int32_t> l;
      for (std::int64_t i = 0; i < rows * per_row; ++i) l.push_back(std::int32_t((i * 7 + m * 3) % classes));
      b.targets = Targets<double>(ConstLabelVector(test::labels(l)), per_row);
    }
    out.push_back(b);
  }
  return out;
}

void check_kind(const std::string& type, int per_row) {
  LossSpec spec;
  spec.type = type;
  const int M = 5;
  const std::int64_t rows = 7, width = 6 * per_row;
  const auto data = batches(spec, M, rows, width, per_row);
  // The host sum of every micro-batch read on its own (what cells did before).
  auto each = make_loss<double>(spec);
  LossSums host;
  for (const auto& b : data) host += each->evaluate(b.outputs, b.targets, 0.25, b.grads);
  const auto reference_grads = test::to_host(data.back().grads);

  auto loss = make_loss<double>(spec);
  loss->reserve(rows, width);
  {
    const Listen listen;
    for (const auto& b : data) loss->accumulate(b.outputs, b.targets, 0.25, b.grads);
    EXPECT_EQ(fences, 0) << type << ": accumulate() fenced";
    EXPECT_EQ(copies, 0) << type << ": accumulate() copied";
  }
  LossSums device;
  {
    const Listen listen;
    device = loss->take_sums();
#if KOKKOS_VERSION >= 40000  // Kokkos 3.4 does not report an instance's fence to Kokkos Tools
    EXPECT_GE(fences, 1) << type;
#endif
    EXPECT_LE(copies, 1) << type;  // one copy to the host (none where the host mirror is the View itself)
  }
  EXPECT_TRUE(same_bits(device.loss, host.loss)) << type << ": " << device.loss << " vs " << host.loss;
  EXPECT_GT(device.loss, 0.0) << type;
  EXPECT_EQ(device.correct, host.correct) << type;
  ASSERT_EQ(device.moments.size(), host.moments.size()) << type;
  for (size_t i = 0; i < host.moments.size(); ++i)
    EXPECT_TRUE(same_bits(device.moments[i], host.moments[i])) << type << " moment " << i;
  EXPECT_EQ(test::to_host(data.back().grads), reference_grads) << type;
  // Read, the totals start again: a second step's sums are its own.
  const LossSums again = loss->take_sums();
  EXPECT_EQ(again.loss, 0.0);
  EXPECT_TRUE(again.moments.empty());
  loss->accumulate(data[0].outputs, data[0].targets, 0.25, data[0].grads);
  const LossSums one = loss->take_sums();
  const LossSums alone = each->evaluate(data[0].outputs, data[0].targets, 0.25, data[0].grads);
  EXPECT_TRUE(same_bits(one.loss, alone.loss)) << type;
  EXPECT_EQ(one.correct, alone.correct) << type;
}

TEST(LossAccumulation, SoftmaxCrossEntropyBitwiseAndNoFence) { check_kind("softmax_cross_entropy", 1); }
TEST(LossAccumulation, TokenCrossEntropyBitwiseAndNoFence) { check_kind("token_cross_entropy", 3); }
TEST(LossAccumulation, MseBitwiseAndNoFence) { check_kind("mse", 1); }
TEST(LossAccumulation, HuberBitwiseAndNoFence) { check_kind("huber", 1); }

TEST(LossAccumulation, BadLabelReportedByTakeSumsThenReset) {
  LossSpec spec;
  auto loss = make_loss<double>(spec);
  const auto z = test::to_device<double>({0, 1, 2, 0, 1, 2}, 2, 3);
  loss->accumulate(z, Targets<double>(ConstLabelVector(test::labels({0, 1}))), 1.0, Matrix<double>());
  loss->accumulate(z, Targets<double>(ConstLabelVector(test::labels({3, 1}))), 1.0, Matrix<double>());
  try {
    loss->take_sums();
    FAIL() << "expected PipelineError";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "softmax cross-entropy: 1 label(s) outside [0, 3)");
  }
  // The totals were reset: the next read holds only what follows.
  loss->accumulate(z, Targets<double>(ConstLabelVector(test::labels({2, 2}))), 1.0, Matrix<double>());
  const LossSums s = loss->take_sums();
  EXPECT_EQ(s.correct, 2);  // both rows' arg-max is class 2
}

// ---- Exact sums (loss/exact_sum.hpp): the metric sums' accumulator. ----

double exact(const std::vector<double>& terms) {
  ExactSum s;
  for (double x : terms) s.add(x);
  return s.value();
}

TEST(ExactSum, KnownSumsRoundedOnce) {
  EXPECT_EQ(exact({}), 0.0);
  EXPECT_EQ(exact({1e16, 1.0, -1e16}), 1.0);  // double addition in this order gives 0
  EXPECT_EQ(exact({-1.5, 0.25}), -1.25);
  const double u = std::ldexp(1.0, -53);  // half an ulp of 1
  EXPECT_EQ(exact({1.0, u}), 1.0);                                          // a tie: to even
  EXPECT_EQ(exact({1.0 + 2 * u, u}), 1.0 + 4 * u);                          // a tie: to even (up)
  EXPECT_EQ(exact({1.0, u, std::ldexp(1.0, -200)}), 1.0 + 2 * u);           // past the tie: up
  EXPECT_EQ(exact({1.0, u, -std::ldexp(1.0, -200)}), 1.0);                  // below the tie: down
  const double tiny = std::numeric_limits<double>::denorm_min();
  EXPECT_EQ(exact({tiny, tiny, tiny}), 3 * tiny);
  EXPECT_EQ(exact({DBL_MIN, -tiny}), DBL_MIN - tiny);  // a subnormal result
  EXPECT_EQ(exact({DBL_MAX, DBL_MAX, -DBL_MAX}), DBL_MAX);  // double addition overflows here
  EXPECT_EQ(exact({DBL_MAX, DBL_MAX}), std::numeric_limits<double>::infinity());
  EXPECT_EQ(exact({-DBL_MAX, -DBL_MAX}), -std::numeric_limits<double>::infinity());
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(exact({1.0, inf, 2.0}), inf);
  EXPECT_EQ(exact({-inf, 1.0}), -inf);
  EXPECT_TRUE(std::isnan(exact({inf, -inf})));
  EXPECT_TRUE(std::isnan(exact({1.0, std::nan("")})));
  EXPECT_EQ(exact({-0.0, 0.0}), 0.0);
}

// Terms k * 2^(s - 40), |k| < 2^50, s in [0, 30], both signs (2^-40 to 2^40
// in magnitude): their sum is exact in a 128-bit integer, whose conversion to double rounds once
// (to nearest even): an independent reference. Every order and every split
// into groups added with += gives that value and the same words; plain
// double addition in two of those orders does not (so the data tells).
TEST(ExactSum, EveryOrderAndSplitGivesTheReference) {
  std::mt19937_64 rng(5);
  std::vector<double> terms;
  __int128 total = 0;
  for (int i = 0; i < 2000; ++i) {
    const int bits = int(rng() % 50) + 1, shift = int(rng() % 31);
    std::int64_t k = std::int64_t(rng() >> (64 - bits));
    if (rng() & 1) k = -k;
    terms.push_back(std::ldexp(double(k), shift - 40));  // exact: |k| < 2^53
    total += __int128(k) * (__int128(1) << shift);
  }
  const double reference = std::ldexp(double(total), -40);
  ExactSum in_order;
  for (double x : terms) in_order.add(x);
  EXPECT_EQ(in_order.value(), reference);
  double forward = 0, backward = 0;
  for (double x : terms) forward += x;
  for (auto it = terms.rbegin(); it != terms.rend(); ++it) backward += *it;
  EXPECT_NE(forward, backward) << "the data does not tell orders apart";
  for (int trial = 0; trial < 10; ++trial) {
    std::shuffle(terms.begin(), terms.end(), rng);
    ExactSum whole;
    std::size_t at = 0;
    while (at < terms.size()) {  // random groups, each summed on its own
      const std::size_t size = std::min<std::size_t>(terms.size() - at, 1 + rng() % 300);
      ExactSum group;
      for (std::size_t i = at; i < at + size; ++i) group.add(terms[i]);
      whole += group;
      at += size;
    }
    EXPECT_EQ(whole.value(), reference) << "trial " << trial;
    EXPECT_TRUE(whole == in_order) << "trial " << trial;
  }
  // Words summed as integers (what the replicas' MPI_SUM does) then normalized.
  ExactSum a, b;
  for (std::size_t i = 0; i < terms.size(); ++i) (i % 3 == 0 ? a : b).add(terms[i]);
  std::vector<std::int64_t> words(kExactWords);
  for (int w = 0; w < kExactWords; ++w) words[size_t(w)] = a.words()[size_t(w)] + b.words()[size_t(w)];
  EXPECT_EQ(ExactSum(words.data()).value(), reference);
}

// The kernel of the next test: a free function, since nvcc rejects a
// KOKKOS_LAMBDA in a TEST body (GoogleTest's TestBody is private).
template <class V, class W>
void exact_sum_on_device(const V& v, const W& words) {
  Kokkos::parallel_for(
      "test::exact_sum", Kokkos::RangePolicy<ExecSpace>(ExecSpace(), 0, std::int64_t(v.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i) { exact_sum_atomic_add(words, 0, v(i, 0)); });
}

// The terms added on the device with atomics (exact_sum_atomic_add) in a
// parallel kernel give the host's words.
TEST(ExactSum, DeviceAtomicAddsGiveTheHostWords) {
  const auto values = test::uniform(5000, 17, -1e6, 1e6);
  ExactSum host;
  for (double x : values) host.add(x);
  const auto v = test::to_device(values, std::int64_t(values.size()), 1);
  Kokkos::View<std::int64_t*, MemSpace> words("words", kExactWords);
  exact_sum_on_device(v, words);
  const auto h = test::to_host(words);
  const ExactSum device(h.data());
  EXPECT_TRUE(device == host);
  EXPECT_EQ(device.value(), host.value());
}

// Class 8 (issue 25): the same rows split into 1, 2, 3, 4 or 6 micro-batches
// (any M, any replica's share) give bitwise the same sums for every loss: each
// sample's term is computed from its own outputs, and terms are added exactly.
// (Before, each micro-batch's sum was formed on its own and the sums added in
// double: the last bits followed M.)
void check_split(const std::string& type, int per_row) {
  LossSpec spec;
  spec.type = type;
  const std::int64_t rows = 24, width = 5 * per_row;
  const auto all = batches(spec, 1, rows, width, per_row)[0];
  LossSums reference;
  for (int M : {1, 2, 3, 4, 6}) {
    auto loss = make_loss<double>(spec);
    loss->reserve(rows, width, per_row);
    const std::int64_t step = rows / M;
    for (std::int64_t at = 0; at < rows; at += step) {
      const auto out = Kokkos::subview(all.outputs, std::make_pair(at, at + step), Kokkos::ALL);
      const auto g = Kokkos::subview(all.grads, std::make_pair(at, at + step), Kokkos::ALL);
      loss->accumulate(out, all.targets.rows(at, step), 0.25, g);
    }
    const LossSums s = loss->take_sums();
    if (M == 1) {
      reference = s;
      EXPECT_GT(s.loss, 0.0) << type;
      continue;
    }
    EXPECT_TRUE(same_bits(s.loss, reference.loss)) << type << " M = " << M << ": " << s.loss << " vs " << reference.loss;
    EXPECT_EQ(s.correct, reference.correct) << type << " M = " << M;
    ASSERT_EQ(s.moments.size(), reference.moments.size()) << type;
    for (size_t i = 0; i < s.moments.size(); ++i)
      EXPECT_TRUE(same_bits(s.moments[i], reference.moments[i])) << type << " M = " << M << " moment " << i;
  }
  // And the rows one by one, in reverse order, each read on its own and added
  // with LossSums::operator+= (evaluation chunks, replicas).
  auto loss = make_loss<double>(spec);
  LossSums reversed;
  for (std::int64_t at = rows - 1; at >= 0; --at) {
    const auto out = Kokkos::subview(all.outputs, std::make_pair(at, at + 1), Kokkos::ALL);
    reversed += loss->evaluate(out, all.targets.rows(at, 1), 0.25, Matrix<double>());
  }
  EXPECT_TRUE(same_bits(reversed.loss, reference.loss)) << type << " row by row";
  EXPECT_EQ(reversed.correct, reference.correct) << type;
  for (size_t i = 0; i < reversed.moments.size(); ++i)
    EXPECT_TRUE(same_bits(reversed.moments[i], reference.moments[i])) << type << " row by row, moment " << i;
}

TEST(LossAccumulation, SoftmaxCrossEntropyBitwiseForEverySplit) { check_split("softmax_cross_entropy", 1); }
TEST(LossAccumulation, TokenCrossEntropyBitwiseForEverySplit) { check_split("token_cross_entropy", 4); }
TEST(LossAccumulation, MseMomentsBitwiseForEverySplit) { check_split("mse", 1); }
TEST(LossAccumulation, HuberBitwiseForEverySplit) { check_split("huber", 1); }

// Buffers reserved before the first step (issue 25): after reserve(), a
// step's accumulate() and take_sums() allocate nothing (Kokkos Tools
// allocation tracking: the high-water mark stays at the bytes live before).
// The backend's process-wide reduction scratch (Kokkos::Serial::scratch_mem)
// grows on the first reduction of its size in the process: counted apart
// (test::process_scratch_bytes), so the test holds alone and after any other.
void check_no_allocation(const std::string& type, int per_row) {
  LossSpec spec;
  spec.type = type;
  const std::int64_t rows = 6, width = 5 * per_row;
  const auto data = batches(spec, 3, rows, width, per_row);
  auto loss = make_loss<double>(spec);
  memory::start_tracking();
  loss->reserve(rows, width, per_row);
  const std::int64_t scratch = test::process_scratch_bytes();
  const std::int64_t reserved = memory::live_bytes() - scratch;
  EXPECT_GT(reserved, 0) << type << ": reserve() allocated nothing";
  memory::reset_peak();
  for (const auto& b : data) loss->accumulate(b.outputs, b.targets, 0.5, b.grads);
  const LossSums s = loss->take_sums();
  const std::int64_t scratch_now = test::process_scratch_bytes();  // grow-only: still live if the step grew it
  EXPECT_EQ(memory::peak_bytes(), reserved + scratch_now) << type << ": a step allocated";
  EXPECT_EQ(memory::live_bytes(), reserved + scratch_now) << type;
  memory::stop_tracking();
  EXPECT_GT(s.loss, 0.0) << type;
}

TEST(LossAccumulation, ReservedBuffersSoAStepAllocatesNothing) {
  check_no_allocation("softmax_cross_entropy", 1);
  check_no_allocation("token_cross_entropy", 4);
  check_no_allocation("mse", 1);
  check_no_allocation("huber", 1);
}

TEST(LossAccumulation, TokenReserveRefusesOutputsThatAreNotTokens) {
  LossSpec spec;
  spec.type = "token_cross_entropy";
  auto loss = make_loss<double>(spec);
  try {
    loss->reserve(4, 10, 3);
    FAIL() << "expected PipelineError";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "token cross-entropy: 10 outputs per sample do not divide into 3 tokens");
  }
}

}  // namespace
}  // namespace gpipe

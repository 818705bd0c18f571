// The losses keep their sums on the device (gpipe/loss/loss.hpp):
// accumulate() per micro-batch launches kernels and never fences or copies
// to the host; take_sums() fences once and returns the totals, bitwise the
// sums the host formed when it read every micro-batch on its own (0 + s_1 +
// s_2 + ... in call order). Checked for every loss kind: softmax and token
// cross-entropy, mse (with its moments), huber; plus the bad-label report
// at take_sums() and the reset after it. (Fences are counted through Kokkos
// Tools where Kokkos reports them: 4.x; 3.4 reports none.)

#include <gtest/gtest.h>

#include <cstring>

#include "../common/test_util.hpp"
#include "gpipe/core/error.hpp"
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

}  // namespace
}  // namespace gpipe

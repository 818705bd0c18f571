// The CNN invariants of test_cnn.cpp in float, once per conv2d
// implementation behind the kernel seam (deck key kernels: portable, and
// onednn / cudnn where built): oneDNN has no f64 convolution, so test_cnn.cpp's
// double runs exercise the portable kernels only. At 1-4 ranks: bitwise
// equal weights and evaluation loss after 3 steps at any K with the same M,
// re-materialization invisible, and zero_bubble (split W/B convolutions)
// bitwise equal to 1F1B.

#include <gtest/gtest.h>
#include <mpi.h>

#include "../common/mpi_util.hpp"
#include "../common/pipeline_run.hpp"
#include "../common/test_util.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

const std::string kLayers = test::kSmallCnn;  // 9 layers, input [2, 6, 7], 3 classes
constexpr std::int64_t kFeatures = 2 * 6 * 7, kBatch = 10;

std::string deck_text(const std::string& kernels, int M, const std::string& pipeline,
                      const std::string& optimizer = "{type: adam, lr: 0.01}") {
  return "seed: 5\nprecision: float\nkernels: " + kernels + "\nmodel:\n  input: [2, 6, 7]\n  layers: " + kLayers +
         "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}"
         "\ntraining: {epochs: 1, batch_size: " + std::to_string(kBatch) +
         ", micro_batches: " + std::to_string(M) + "}\noptimizer: " + optimizer + "\npipeline: " +
         pipeline + "\n";
}

const Dataset& data() {
  static const Dataset d = test::synthetic(kBatch * 2, kFeatures, 3, 13);
  return d;
}

std::vector<float> train(const std::string& text, MPI_Comm comm) {
  Pipeline<float> p(parse_deck(text, "cnn-deck"), comm);
  test::run_steps(p, data(), 5, 2, kBatch, 0, 3);
  auto out = p.gather_parameters();
  out.push_back(float(p.evaluate(data()).loss));
  return out;
}

std::vector<std::string> choices() {
  std::vector<std::string> v{"portable"};
  if (kernels::has(kernels::Implementation::onednn, kernels::Primitive::conv2d, 4)) v.push_back("onednn");
  if (kernels::has(kernels::Implementation::cudnn, kernels::Primitive::conv2d, 4)) v.push_back("cudnn");
  return v;
}

TEST(CnnKernels, FloatBitwiseAcrossCellsRematAndSchedules) {
  for (const auto& k : choices()) {
    std::vector<float> reference;
    if (world_rank() == 0) reference = train(deck_text(k, 4, "{}"), MPI_COMM_SELF);
    const auto split = train(deck_text(k, 4, "{balance: flops}"), MPI_COMM_WORLD);
    const auto remat = train(deck_text(k, 4, "{remat: always}"), MPI_COMM_WORLD);
    const auto ofob = train(deck_text(k, 4, "{schedule: 1f1b}"), MPI_COMM_WORLD);
    const auto zb = train(deck_text(k, 4, "{schedule: zero_bubble, remat: except_last}"), MPI_COMM_WORLD);
    if (world_rank() != 0) continue;
    ASSERT_EQ(split.size(), reference.size());
    EXPECT_EQ(split, reference) << k << ": K = " << world_size();
    EXPECT_EQ(remat, reference) << k << ": remat always";
    EXPECT_EQ(zb, ofob) << k << ": zero_bubble is 1F1B's sum";
  }
}

// The two implementations train the same model within float rounding (SGD:
// Adam's normalized step turns a rounding-level gradient difference near 0
// into a difference of up to lr per step).
// Every vendor conv2d (onednn on x86, cudnn in CUDA builds; none: skipped).
TEST(CnnKernels, VendorTrainsLikePortable) {
  if (choices().size() < 2) GTEST_SKIP() << "built without oneDNN or cuDNN";
  const std::string sgd = "{type: sgd, lr: 0.05}";
  const auto portable = train(deck_text("portable", 2, "{}", sgd), MPI_COMM_WORLD);
  for (std::size_t c = 1; c < choices().size(); ++c) {
    const std::string k = choices()[c];
    const auto vendor = train(deck_text(k, 2, "{}", sgd), MPI_COMM_WORLD);
    if (world_rank() != 0) continue;
    ASSERT_EQ(portable.size(), vendor.size());
    double worst = 0;
    for (std::size_t i = 0; i < portable.size(); ++i)
      worst = std::max(worst, double(std::abs(portable[i] - vendor[i])) / std::max(1.0, double(std::abs(portable[i]))));
    // 3 SGD steps from the same start: float rounding differences (~1e-7
    // relative per product) in the gradients stay far below 1e-4.
    EXPECT_LE(worst, 1e-4) << k;
    EXPECT_GT(worst, 0.0) << "the two runs should differ in rounding (else " << k << " did not run)";
  }
}

}  // namespace
}  // namespace gpipe

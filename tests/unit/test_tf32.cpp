// pipeline.tf32 (gpipe/kernels/backend.hpp, set_tf32): the deck key and its
// exact errors; plan_run handing the key to the seam; and the seam's answer
// where no implementation has TF32 (every CPU build: no effect, reported in
// the selection summary, a note once per process). The vendor side (cuBLAS
// CUBLAS_COMPUTE_32F_FAST_TF32, cuDNN CUDNN_TENSOR_OP_MATH) runs only on a
// GPU: test_kernels_cublas.cpp, test_kernels_cudnn.cpp. Also the memory
// model's vendor workspaces where no vendor library is built (cuBLAS 0,
// cuDNN refused with its message).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "../common/deck_error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/conv.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

using kernels::Implementation;
using kernels::Primitive;

const std::string kCnn =
    "seed: 1\nmodel:\n  input: [1, 8, 8]\n  layers: [{type: conv2d, filters: 4, kernel: 3}, {type: relu}, "
    "{type: flatten}, {type: dense, units: 3}]\n"
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
    "training: {epochs: 1, batch_size: 8, micro_batches: 2}\noptimizer: {type: adam, lr: 0.01}\n";

constexpr Primitive kAll[] = {Primitive::gemm, Primitive::gemm_bias, Primitive::batched_gemm, Primitive::attention,
                              Primitive::conv2d};

// Whether this build and device run some float primitive in TF32 under `auto`.
bool some_tf32() {
  for (Primitive p : kAll)
    if (kernels::has_tf32(kernels::implementation(p, 4), p)) return true;
  return false;
}

TEST(Tf32, DeckKeyDefaultValuesAndErrors) {
  EXPECT_FALSE(parse_deck(kCnn, "deck.yaml").pipeline.tf32);
  EXPECT_TRUE(parse_deck(kCnn + "pipeline: {tf32: true}\n", "deck.yaml").pipeline.tf32);
  EXPECT_FALSE(parse_deck(kCnn + "pipeline: {tf32: false}\n", "deck.yaml").pipeline.tf32);
  EXPECT_TRUE(parse_deck(kCnn, "deck.yaml", {"pipeline.tf32=true"}).pipeline.tf32);
  EXPECT_FALSE(parse_deck(kCnn + "pipeline: {tf32: true}\n", "deck.yaml", {"pipeline.tf32=false"}).pipeline.tf32);
  EXPECT_EQ(test::deck_text_error(kCnn, {"pipeline.tf32=sometimes"}),
            "deck.yaml (--set): pipeline.tf32: expected true or false, got 'sometimes'");
  EXPECT_EQ(test::deck_text_error(kCnn + "pipeline: {tf32: [1]}\n"),
            "deck.yaml:8:18: pipeline.tf32: expected true or false, got a list");
  EXPECT_EQ(key_domain("pipeline.tf32"), "true or false");
}

// Every word of `kernels` passes the deck's domain; one this build lacks is
// refused by kernels::parse_choice, which says why (before, cublas and
// cudnn were refused by the domain even in the CUDA builds that have them).
TEST(Tf32, KernelsDomainHasTheVendorWordsAndTheBuildDecides) {
  EXPECT_EQ(key_domain("kernels"), "auto, portable, onednn, cublas or cudnn");
  const auto have = kernels::available();
  const bool cublas = std::find(have.begin(), have.end(), Implementation::cublas) != have.end();
  const bool cudnn = std::find(have.begin(), have.end(), Implementation::cudnn) != have.end();
  if (cublas) {
    EXPECT_EQ(parse_deck("kernels: cublas\n" + kCnn, "deck.yaml").kernels, "cublas");
  } else {
    EXPECT_EQ(test::deck_text_error("kernels: cublas\n" + kCnn).rfind(
                  "deck.yaml: kernels: this build has no cuBLAS (a CUDA build of Kokkos with GPIPE_ENABLE_CUBLAS=ON); "
                  "expected auto, portable",
                  0),
              0u)
        << test::deck_text_error("kernels: cublas\n" + kCnn);
  }
  if (cudnn) {
    EXPECT_EQ(parse_deck("kernels: cudnn\n" + kCnn, "deck.yaml").kernels, "cudnn");
  } else {
    EXPECT_EQ(test::deck_text_error("kernels: cudnn\n" + kCnn).rfind(
                  "deck.yaml: kernels: this build has no cuDNN (a CUDA build of Kokkos with GPIPE_ENABLE_CUDNN=ON and "
                  "cuDNN 9); expected auto, portable",
                  0),
              0u)
        << test::deck_text_error("kernels: cudnn\n" + kCnn);
  }
  EXPECT_EQ(test::deck_text_error("kernels: fast\n" + kCnn),
            "deck.yaml:1:10: kernels: expected auto, portable, onednn, cublas or cudnn, got 'fast'");
}

// gpipe-plan's path: plan_run sets the process-wide permission from the deck
// (cuDNN's workspace sizes follow its math type), and clears it again.
TEST(Tf32, PlanRunHandsTheKeyToTheSeam) {
  kernels::set_tf32(false);
  const RunPlan on = plan_run(parse_deck(kCnn + "pipeline: {tf32: true}\n", "deck.yaml"), 1);
  EXPECT_TRUE(kernels::tf32_allowed());
  const RunPlan off = plan_run(parse_deck(kCnn, "deck.yaml"), 1);
  EXPECT_FALSE(kernels::tf32_allowed());
  if (!some_tf32()) {  // nothing changes where nothing has TF32
    ASSERT_EQ(on.memory.size(), off.memory.size());
    EXPECT_EQ(on.memory[0].total(), off.memory[0].total());
  }
}

// Where no implementation has TF32 (CPU builds; a CUDA build's portable
// choice): the key has no effect, the summaries say so, and the note comes
// once per process with the implementations that run instead.
TEST(Tf32, NoEffectWithoutAVendorTf32AndANoteOnce) {
  if (std::getenv("GPIPE_KERNELS")) GTEST_SKIP() << "GPIPE_KERNELS overrides the choice this test makes";
  kernels::select(kernels::Choice::portable);
  kernels::set_tf32(false);
  EXPECT_EQ(kernels::tf32_summary(), "tf32 off");
  EXPECT_EQ(kernels::tf32_note(), "");  // nothing requested: no note, nothing consumed
  kernels::set_tf32(true);
  EXPECT_TRUE(kernels::tf32_allowed());
  for (Primitive p : kAll) {
    EXPECT_FALSE(kernels::has_tf32(Implementation::portable, p)) << kernels::name(p);
    EXPECT_FALSE(kernels::has_tf32(Implementation::onednn, p)) << kernels::name(p);
    EXPECT_FALSE(kernels::uses_tf32(p)) << kernels::name(p);  // portable everywhere
  }
  const std::string none = "tf32 requested, no effect: no float primitive of this run has TF32 (fp32 throughout)";
  EXPECT_EQ(kernels::tf32_summary(), none);
  const std::string summary = kernels::selection_summary();
  EXPECT_EQ(summary.substr(summary.size() - none.size() - 2), "; " + none) << summary;
  EXPECT_EQ(kernels::tf32_note(),
            "pipeline.tf32: true has no effect in this run: TF32 exists only for float GEMMs on cuBLAS and float "
            "convolutions on cuDNN with a GPU of compute capability 8.0 or newer, and this run's float primitives "
            "run portable (kernels: portable); computing in full fp32");
  EXPECT_EQ(kernels::tf32_note(), "");  // once per process
  kernels::set_tf32(false);
  EXPECT_EQ(kernels::tf32_summary(), "tf32 off");
  EXPECT_EQ(summary.find("; tf32 "), summary.rfind("; tf32 "));  // one tf32 phrase
  kernels::select(kernels::Choice::automatic);
  if (!some_tf32()) {
    for (Implementation i : kernels::available())
      for (Primitive p : kAll) EXPECT_FALSE(kernels::has_tf32(i, p)) << kernels::name(i) << " " << kernels::name(p);
    EXPECT_NE(kernels::build_summary().find("; TF32 (pipeline.tf32): "), std::string::npos)
        << kernels::build_summary();
  }
}

// The memory model's vendor workspaces in a build without the vendor
// library: cuBLAS's is 0 bytes, cuDNN's size query refuses with its reason.
TEST(Tf32, VendorWorkspacesWithoutTheLibraries) {
  const auto have = kernels::available();
  if (std::find(have.begin(), have.end(), Implementation::cublas) == have.end())
    EXPECT_EQ(kernels::cublas_workspace_bytes(), 0);
  else
    EXPECT_EQ(kernels::cublas_workspace_bytes(), std::int64_t(32) << 20);
  if (std::find(have.begin(), have.end(), Implementation::cudnn) != have.end())
    GTEST_SKIP() << "cuDNN built: test_kernels_cudnn.cpp checks its workspace on a GPU";
  kernels::ConvShape s;
  s.channels = 1;
  s.height = s.width = 8;
  s.filters = 4;
  s.kernel_h = s.kernel_w = 3;
  try {
    kernels::cudnn_workspace_bytes(s, 4, 4);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gpipe::kernels::cudnn_workspace_bytes: this build has no cuDNN (GPIPE_ENABLE_CUDNN=OFF)");
  }
  try {
    kernels::cudnn_workspace_bytes(s, 4, 2);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "gpipe::kernels::Conv2d::cudnn_workspace_bytes: 2 bytes per scalar (cuDNN runs float and double)");
  }
}

}  // namespace
}  // namespace gpipe

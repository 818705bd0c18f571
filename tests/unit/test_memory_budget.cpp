// pipeline.memory_budget and the planner's memory (train/memory.hpp): byte
// sizes parsed with their exact errors, the deck key, and the deck's
// `kernels:` choice applied by plan_run to conv2d's saved columns and
// workspace (gpipe-plan and --check used the default choice before).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "../common/deck_error.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/train/memory.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {
namespace {

std::string size_error(const std::string& text) {
  try {
    parse_byte_size(text, "f");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(MemoryBudget, ByteSizesAndTheirErrors) {
  EXPECT_EQ(parse_byte_size("512MiB", "f"), 536870912);
  EXPECT_EQ(parse_byte_size("2GiB", "f"), 2147483648);
  EXPECT_EQ(parse_byte_size("1.5 GiB", "f"), 1610612736);
  EXPECT_EQ(parse_byte_size("800MB", "f"), 800000000);
  EXPECT_EQ(parse_byte_size("1kB", "f"), 1000);
  EXPECT_EQ(parse_byte_size("3KiB", "f"), 3072);
  EXPECT_EQ(parse_byte_size("4096", "f"), 4096);
  EXPECT_EQ(parse_byte_size("80GB", "f"), 80000000000);
  const std::string expected =
      "f: expected a byte size such as 512MiB, 2GiB or 800MB (units B, KiB, MiB, GiB, TiB, kB, MB, GB, TB), got ";
  EXPECT_EQ(size_error("lots"), expected + "'lots'");
  EXPECT_EQ(size_error("-1MiB"), expected + "'-1MiB'");
  EXPECT_EQ(size_error("12 XB"), expected + "'12 XB' (unknown unit 'XB')");
  EXPECT_EQ(size_error("1.5"), expected + "'1.5' (a number of bytes must be an integer)");
  EXPECT_EQ(size_error("0MiB"), expected + "'0MiB' (it must be at least 1 byte)");
  EXPECT_EQ(format_bytes(536870912), "512.0 MiB");
  EXPECT_EQ(format_bytes(2147483648), "2.00 GiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

const std::string kCnn =
    "seed: 1\nmodel:\n  input: [1, 8, 8]\n  layers: [{type: conv2d, filters: 4, kernel: 3}, {type: relu}, "
    "{type: flatten}, {type: dense, units: 3}]\n"
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
    "training: {epochs: 1, batch_size: 8, micro_batches: 2}\noptimizer: {type: adam, lr: 0.01}\n";

TEST(MemoryBudget, TheDeckKeyAndItsErrors) {
  EXPECT_EQ(parse_deck(kCnn + "pipeline: {memory_budget: 512MiB}\n", "deck.yaml").pipeline.memory_budget,
            536870912);
  EXPECT_EQ(parse_deck(kCnn, "deck.yaml", {"pipeline.memory_budget=2GiB"}).pipeline.memory_budget, 2147483648);
  EXPECT_EQ(parse_deck(kCnn, "deck.yaml").pipeline.memory_budget, 0);
  EXPECT_EQ(test::deck_text_error(kCnn + "pipeline: {memory_budget: 12 parsecs}\n"),
            "deck.yaml:8:27: pipeline.memory_budget: expected a byte size such as 512MiB, 2GiB or 800MB (units B, "
            "KiB, MiB, GiB, TiB, kB, MB, GB, TB), got '12 parsecs' (unknown unit 'parsecs')");
  // A budget the layout does not fit: the verdict with the cell's bytes.
  const Deck small = parse_deck(kCnn, "deck.yaml", {"pipeline.memory_budget=1KiB"});
  const RunPlan plan = plan_run(small, 1);
  try {
    check_memory_budget(plan.memory, small.pipeline.memory_budget, plan.grid);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(fmt::format("pipeline.memory_budget: cell 0 (rank 0) needs {} ({} bytes), more than the "
                                     "budget of 1.0 KiB (1024 bytes) per rank",
                                     format_bytes(plan.memory[0].total()), plan.memory[0].total()),
                         0),
              0u)
        << what;
  }
}

// Issue 21: plan_run applies the deck's `kernels:` to conv2d's saved columns
// (portable keeps them, taps x pixels per sample; oneDNN none) and workspace.
TEST(MemoryBudget, PlanRunAppliesTheDecksKernelChoice) {
  const auto have = kernels::available();
  if (std::find(have.begin(), have.end(), kernels::Implementation::onednn) == have.end() ||
      std::getenv("GPIPE_KERNELS"))
    GTEST_SKIP() << "needs oneDNN and no GPIPE_KERNELS override";
  const RunPlan portable = plan_run(parse_deck("kernels: portable\n" + kCnn, "deck.yaml"), 1);
  const RunPlan onednn = plan_run(parse_deck("kernels: onednn\n" + kCnn, "deck.yaml"), 1);
  kernels::select(kernels::Choice::automatic);  // the process-wide default again
  // Columns: 1 x 3 x 3 taps x 6 x 6 pixels = 324 floats per sample, for the
  // M = 2 kept micro-batches of 4 samples.
  EXPECT_EQ(portable.activation_bytes[0] - onednn.activation_bytes[0], 2 * 4 * 324 * 4);
  EXPECT_EQ(portable.memory[0].activations - onednn.memory[0].activations, 2 * 4 * 324 * 4);
  // Workspace: portable's columns of a micro-batch (4 x 9, 36) and its weight
  // gradient sum (4, 9); oneDNN's weight and bias gradients (M > 1).
  EXPECT_EQ(portable.memory[0].workspaces - onednn.memory[0].workspaces,
            (4 * 9 * 36 + 4 * 9) * 4 - (4 * 9 + 4) * 4);
}

// The slots a kernels::OperandReuse scope holds (gemm.hpp: oneDNN's bf16
// GEMM) were left out of the memory model: two grow-only bf16 slots, the
// largest x and the largest dy the rank's scoped backwards convert
// (seam_reuse, part of seam_scratch; tests/mpi/test_memory.cpp measures
// them to the byte). A dense layer's scope is its fused backward (1f1b,
// fill_drain at M = 1), not a split one (zero_bubble) or one under the
// whole-batch W (fill_drain, M > 1); a transformer_block's and a
// patch_embed's every backward.
TEST(MemoryBudget, OperandReuseSlotsAreCounted) {
  const auto have = kernels::available();
  if (std::find(have.begin(), have.end(), kernels::Implementation::onednn) == have.end() ||
      std::getenv("GPIPE_KERNELS"))
    GTEST_SKIP() << "needs oneDNN and no GPIPE_KERNELS override";
  if (!kernels::has(kernels::Implementation::onednn, kernels::Primitive::gemm, 2))
    GTEST_SKIP() << "oneDNN has no bf16 primitives on this CPU (below AVX-512): no slots to count";
  // Dense inputs 6, 24, 16 and outputs 24, 16, 4: x and dy at most 24 values a row.
  const std::string mlp = "seed: 1\nprecision: bf16\nmodel:\n  input: 6\n  layers: [{type: dense, units: 24}, "
                          "{type: layer_norm}, {type: gelu}, {type: dense, units: 16}, {type: tanh}, "
                          "{type: dense, units: 4}]\n"
                          "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
                          "optimizer: {type: adam, lr: 0.01}\n";
  const auto memory = [](const std::string& text) { return plan_run(parse_deck(text, "deck.yaml"), 1).memory.at(0); };
  const std::string m3 = "training: {epochs: 1, batch_size: 12, micro_batches: 3}\n";  // 4 rows
  const CellMemory one = memory("kernels: onednn\n" + mlp + m3 + "pipeline: {schedule: 1f1b}\n");
  const CellMemory zb = memory("kernels: onednn\n" + mlp + m3 + "pipeline: {schedule: zero_bubble}\n");
  const CellMemory fd = memory("kernels: onednn\n" + mlp + m3);
  const CellMemory fd1 = memory("kernels: onednn\n" + mlp + "training: {epochs: 1, batch_size: 4}\n");
  const CellMemory portable = memory("kernels: portable\n" + mlp + m3 + "pipeline: {schedule: 1f1b}\n");
  kernels::select(kernels::Choice::automatic);  // the process-wide default again
  EXPECT_EQ(one.seam_reuse, 2 * (4 * 24 * 2));  // x and dy: 4 rows x 24 values x 2 bytes
  EXPECT_EQ(one.seam_scratch - zb.seam_scratch, one.seam_reuse);
  EXPECT_EQ(zb.seam_reuse, 0);
  EXPECT_EQ(fd.seam_reuse, 0);
  EXPECT_EQ(fd1.seam_reuse, 2 * (4 * 24 * 2));
  EXPECT_EQ(portable.seam_reuse, 0);  // the rounded route converts nothing into them
  // A ViT under fill_drain: its final dense layer has the whole-batch W, the
  // blocks and the patch embedding hold scopes. 3 rows of T = 4 tokens (N = 12):
  // block 2 (d = 8, hidden 32): x 12 x 32, dy 12 x 32 (qkv's 3d = 24 less);
  // block 1 (hidden 12): 12 x 12 and 12 x 24; patch_embed: 12 x 4 and 12 x 8.
  const CellMemory vit = memory(
      "kernels: onednn\nseed: 1\nprecision: bf16\nmodel:\n  input: [1, 4, 4]\n  layers: [{type: patch_embed, patch: 2, "
      "width: 8}, {type: pos_embed}, {type: transformer_block, heads: 2, hidden: 12}, {type: transformer_block, "
      "heads: 2}, {type: token_mean}, {type: layer_norm}, {type: dense, units: 3}]\n"
      "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
      "training: {epochs: 1, batch_size: 6, micro_batches: 2}\noptimizer: {type: adam, lr: 0.01}\n");
  kernels::select(kernels::Choice::automatic);
  EXPECT_EQ(vit.seam_reuse, 2 * (12 * 32 * 2));
}

}  // namespace
}  // namespace gpipe

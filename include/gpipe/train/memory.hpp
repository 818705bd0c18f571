#pragma once
// The memory model: the exact bytes one rank allocates in the device memory
// space for its cell (pipeline stage), from the deck alone — no MPI, no
// Kokkos — and the per-rank budget check (deck key pipeline.memory_budget).
// Each term is what the library allocates (Cell, optimizer, gradient
// reducer, Pipeline's staging, the layers' and losses' workspaces); the sum
// is checked against the measured high-water mark of Kokkos allocations
// (core/memory.hpp; tests/mpi/test_memory.cpp, scripts/check_memory_model.py,
// docs/scaling-studies.md "Capacity").

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/model/partition.hpp"
#include "gpipe/parallel/grid.hpp"

namespace gpipe {

/// One cell's (one rank's) device bytes, by what holds them.
struct CellMemory {
  std::int64_t parameters = 0;   ///< the cell's flat parameter buffer (P x sizeof(T); a shared tied matrix once)
  std::int64_t gradients = 0;    ///< its gradient buffer (P x sizeof(T))
  std::int64_t layer_state = 0;  ///< non-trainable layer state (running statistics)
  std::int64_t optimizer = 0;    ///< SGD velocity (P; allocated at any momentum), Adam/AdamW m and v (2P)
  /// The buffer plan's activation storage (cell_activation_bytes: kept
  /// outputs, saved state, boundary inputs/outputs, logits, whole-batch W),
  /// with each boundary buffer's 16-bit wire buffer under bf16 / fp16 (the
  /// only buffer with 16-bit storage, where the kept outputs and W's kept
  /// output gradients are 2 bytes a value too: pipeline/stage.hpp).
  std::int64_t activations = 0;
  /// Gradient buffers the plan allocates besides (dL/dy receive slots,
  /// logit gradients, dL/dx send slots: 16-bit with 16-bit storage; the
  /// backward's two ping-pong rows; with 16-bit storage the float working
  /// buffer a 16-bit layer input is unpacked into: float).
  std::int64_t gradient_buffers = 0;
  /// Layers' reserve() workspaces (a conv2d on cuDNN: cuDNN's own size,
  /// kernels::cudnn_workspace_bytes, which needs a CUDA device), the loss's
  /// row buffers, and in CUDA builds whose GEMMs run on the cublas
  /// implementation its 32 MiB cuBLAS workspace (kernels::cublas_workspace_bytes).
  /// Libraries' internal allocations outside Kokkos (Kokkos Kernels' own
  /// cuBLAS handle, cuDNN's handle) are not Kokkos Views and not counted.
  std::int64_t workspaces = 0;
  /// Pipeline's mini-batch inputs (first cell) and targets (last), and the
  /// tied embeddings' peer V x d slice on the two tied cells when they
  /// differ (held from construction). With the tied pair on one rank,
  /// parameters and optimizer hold the matrix once (gradients keep the
  /// head's slot: docs/design.md, "Language model").
  std::int64_t staging = 0;
  std::int64_t reduction = 0;    ///< deterministic gradient reduction's gather buffer (D x P)
  /// Held only during a step's tail: gradient clipping's per-layer bounds
  /// and sums (8 (2 L_k + 1) bytes), counted in the peak.
  std::int64_t transient = 0;
  /// bf16 / fp16 runs: the copy of the cell's parameters the primitives
  /// read (kernels::WeightCopy): P x 2 bytes where the GEMM is oneDNN's bf16
  /// primitive, P x 4 bytes (rounded fp32 values) on the rounded route; 0
  /// for float and double.
  std::int64_t weight_copy = 0;
  /// bf16 / fp16: the kernel seam's grow-only operand scratch (the
  /// converted GEMM operands: 2 bytes a value with oneDNN's bf16 GEMM, else
  /// rounded fp32 copies), estimated from the shapes as the largest
  /// activation operand of the rank's layers (x and dy of a layer with
  /// weights, whole-batch under a BatchWeights op; a transformer block's
  /// widest token rows) in each of its two slots; process-wide, so not exact
  /// (scripts/check_memory_model.py checks it within 5%). It includes
  /// seam_reuse.
  std::int64_t seam_scratch = 0;
  /// The part of seam_scratch that is exact: with oneDNN's bf16 GEMM, the
  /// two grow-only slots of the copies a kernels::OperandReuse scope holds
  /// (gemm.hpp; a dense layer's fused backward outside a whole-batch W, and
  /// every backward of a transformer_block or patch_embed): 2 bytes a value
  /// of the largest x and of the largest dy those backwards convert on the
  /// rank (LayerEntry::reused_operands); 0 on other routes and formats.
  /// Not added to total() apart (seam_scratch holds it).
  std::int64_t seam_reuse = 0;
  /// Peak device bytes of a training step: the sum of every term.
  std::int64_t total() const;
};

/// The device bytes of every cell of `deck` on `cells` ranks per pipeline,
/// with partition `partition` over the stages of the deck's schedule
/// (deck_schedule(deck, cells): K x chunks, 2K for the V schedules, or a
/// schedule file's) and `replicas` replicas (replica 0's shard, the
/// largest). Pure; throws InputError as model_shapes and deck_schedule do.
std::vector<CellMemory> cell_memory(const Deck& deck, const Partition& partition, int replicas, int cells);

/// Throws InputError when a cell's total() exceeds `budget` bytes (> 0),
/// naming the cell, its rank(s), its bytes against the budget and each term,
/// e.g. "pipeline.memory_budget: cell 1 (rank 1) needs 600.0 MiB, more than
/// the budget of 512.0 MiB per rank (parameters ..., ...); use more cells,
/// pipeline.remat: always or more micro-batches". Every rank computes the
/// same verdict from the deck (no communication).
void check_memory_budget(const std::vector<CellMemory>& cells, std::int64_t budget, const GridShape& grid);

}  // namespace gpipe

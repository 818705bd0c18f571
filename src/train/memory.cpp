#include "gpipe/train/memory.hpp"

#include "gpipe/pipeline/schedule_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "gpipe/core/error.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/layers/registry.hpp"
#include "gpipe/layers/tied.hpp"
#include "gpipe/loss/exact_sum.hpp"
#include "gpipe/model/shapes.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/stage.hpp"
#include "gpipe/pipeline/wire_format.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {

std::int64_t CellMemory::total() const {
  return parameters + gradients + layer_state + optimizer + activations + gradient_buffers + workspaces + staging +
         reduction + transient + weight_copy + seam_scratch;
}

namespace {

// The bytes Kokkos 3.4 allocates for a View of `bytes` bytes of data: the
// span rounded up to 8 bytes (Kokkos_ViewMapping.hpp, MemorySpanMask), and
// 128 for a labelled View of no elements (measured: the allocation record
// alone).
std::int64_t view_bytes(std::int64_t bytes) { return bytes == 0 ? 128 : (bytes + 7) / 8 * 8; }

// A term as a list of Views: `add(bytes)` adds one View's allocation, none
// for a View the library leaves unallocated (`optional` and empty).
struct Term {
  std::int64_t bytes = 0;
  void add(std::int64_t data) { bytes += view_bytes(data); }
  void add_if(std::int64_t data) {
    if (data > 0) bytes += view_bytes(data);
  }
};

}  // namespace

std::vector<CellMemory> cell_memory(const Deck& deck, const Partition& partition, int replicas, int cells) {
  const auto shapes = model_shapes(deck.model);
  const int S = partition.cells(), M = deck.training.micro_batches, D = replicas;
  const int K = cells;
  const std::int64_t s = deck.precision == "double" ? 8 : 4;
  const std::int64_t shard = largest_shard(deck, D);
  const std::int64_t rows = (shard + M - 1) / M;
  CellOptions options;
  options.max_batch = shard;
  options.micro_batches = M;
  options.remat = deck.pipeline.remat;
  options.schedule = deck.pipeline.schedule;
  options.chunks = deck.pipeline.chunks;
  const Precision precision = precision_policy(deck.precision);
  options.wire = precision.wire;
  options.activation_storage16 = deck.pipeline.activation_storage16;
  // 16-bit storage: the kept values and the boundary buffers hold v = 2
  // bytes a value and no float copy; a 16-bit wire with float storage adds
  // a 2-byte wire buffer to each boundary buffer (BoundaryBuffer).
  const bool storage16 = stores_16_bit(options, s);
  const std::int64_t v = storage16 ? 2 : s;
  const bool wire16 = packed_wire(precision.wire);
  const Schedule schedule = deck_schedule(deck, K);
  require(schedule.stages == S, fmt::format("cell_memory: the partition has {} stages, the schedule of {} cells {}",
                                            S, K, schedule.stages));
  const TiedLayers tied = tied_layers(deck.model);
  const auto stage_of = [&](int layer) {
    int stage = 0;
    while (stage + 1 < S && partition.first_layer(stage + 1) <= layer) ++stage;
    return stage;
  };
  // The seam's reduced-precision operand scratch (kernels/reduced.cpp): a
  // 16-bit copy (bf16 with oneDNN) or a rounded fp32 copy (fp16, portable)
  // of each GEMM operand that is not a weight (those are read from the
  // weight copy), in two grow-only slots.
  const bool bf16_onednn = precision.compute == Format::bf16 &&
                           kernels::implementation(kernels::Primitive::gemm, 2) == kernels::Implementation::onednn;
  const bool onednn_conv = precision.compute == Format::bf16 &&
                           kernels::implementation(kernels::Primitive::conv2d, 2) == kernels::Implementation::onednn;
  std::vector<CellMemory> out;
  for (int k = 0; k < K; ++k) {
    std::int64_t params = 0, state = 0, layers_on_rank = 0;
    bool gemm_layers = false;  // a layer that calls the seam's GEMMs (dense, lm_head, transformer_block)
    std::int64_t scratch_a = 0, scratch_b = 0, scratch_x = 0, scratch_dy = 0;  // values
    std::int64_t held_x = 0, held_dy = 0;  // values: the OperandReuse slots (below)
    Term workspaces, activations, gradient_buffers, staging;
    // A boundary buffer of `values` values: the float buffer (none with
    // 16-bit storage) and the 16-bit wire buffer (a 16-bit wire).
    const auto boundary = [&](Term& term, std::int64_t values) {
      if (!storage16) term.add(values * s);
      if (wire16) term.add(values * 2);
    };
    // As Runner's and each Stage's constructors allocate them
    // (pipeline/runner.cpp, pipeline/stage.cpp).
    for (const int st : stages_of_rank(schedule, k)) {
      const int first = partition.first_layer(st), count = partition.counts.at(size_t(st));
      const bool batch_source = st == 0, loss_sink = st == S - 1;
      const auto layer = [&](int l) -> const LayerShape& { return shapes.at(size_t(first + l)); };
      const auto saved = [&](int l) { return layer(l).saved.elements(rows) * s; };
      const auto splits = [&](int l) { return layer(l).entry && layer(l).entry->splits_backward; };
      const std::int64_t in = layer(0).input.size(), out_width = layer(count - 1).output.size();
      std::int64_t widest = in;
      for (int l = 0; l < count; ++l) {
        params += layer(l).parameter_count();
        state += layer(l).state_count();
        ++layers_on_rank;
        widest = std::max(widest, layer(l).output.size());
        const std::string type = layer(l).type();
        gemm_layers = gemm_layers || type == "dense" || type == "lm_head" || type == "transformer_block";
        if (layer(l).entry && layer(l).entry->workspace)
          for (const std::int64_t b : layer(l).entry->workspace(*layer(l).spec.config, layer(l).input, rows, int(s), M))
            workspaces.add(b);
      }
      const CellBufferPlan plan = plan_buffers(schedule, st);
      // An estimate from the shapes: a layer with weights multiplies its
      // input x and output gradient dy (whole-batch for a BatchWeights W),
      // a transformer block its token rows up to its widest workspace;
      // oneDNN's bf16 convolution converts in its own reorders.
      for (int l = 0; l < count && precision.reduced(); ++l) {
        const LayerShape& ls = layer(l);
        if (ls.parameter_count() == 0 || (onednn_conv && ls.type() == "conv2d")) continue;
        const bool whole = plan.batch_weights >= 0 && splits(l) && ls.entry->whole_batch_weights;
        const std::int64_t R = whole ? shard : rows;
        scratch_a = std::max({scratch_a, R * ls.input.size(), rows * ls.output.size()});
        scratch_b = std::max(scratch_b, R * ls.output.size());
        if (ls.entry->workspace)
          for (const std::int64_t b : ls.entry->workspace(*ls.spec.config, ls.input, rows, int(s), M))
            if (ls.type() == "transformer_block") {
              scratch_a = std::max(scratch_a, b / s);
              scratch_b = std::max(scratch_b, b / s);
            }
        // The rounded route's attention rounds qkv (rows x 3 width) and its
        // output gradient (rows x width) once per call, in two more slots.
        if (ls.type() == "transformer_block" && !bf16_onednn) {
          scratch_x = std::max(scratch_x, 3 * rows * ls.input.size());
          scratch_dy = std::max(scratch_dy, rows * ls.input.size());
        }
      }
      // The copies a backward's kernels::OperandReuse scope holds (gemm.hpp;
      // oneDNN's bf16 GEMM only): two more grow-only slots of bf16 values,
      // the scope's first and second conversion, i.e. the largest x and the
      // largest dy of the rank's scoped backwards (LayerEntry::reused_operands).
      // A splitting layer (dense) opens its scope only in a fused B op and not
      // under a whole-batch W (its B then runs backward_input alone); a layer
      // that does not split in every backward op (B or I).
      if (bf16_onednn) {
        bool fused = false, backward = false;
        for (const Op& op : schedule.ops.at(size_t(k)))
          if (op.stage == st) {
            fused = fused || op.kind == OpKind::Backward;
            backward = backward || op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput;
          }
        for (int l = 0; l < count; ++l) {
          const LayerShape& ls = layer(l);
          if (!ls.entry || !ls.entry->reused_operands) continue;
          const bool scoped =
              splits(l) ? fused && !(plan.batch_weights >= 0 && ls.entry->whole_batch_weights) : backward;
          if (!scoped) continue;
          const ReusedOperands r = ls.entry->reused_operands(*ls.spec.config, ls.input, rows);
          held_x = std::max(held_x, r.x);
          held_dy = std::max(held_dy, r.dy);
        }
      }
      // The whole-batch W (a BatchWeights op): each such layer's output
      // gradients over the shard, and its input (one shared buffer of the
      // widest without re-materialization; stage 0's first layer reads the batch).
      std::int64_t widest_input = 0;
      for (int l = 0; l < count; ++l) {
        if (!(plan.batch_weights >= 0 && splits(l) && layer(l).entry->whole_batch_weights)) continue;
        activations.add(shard * layer(l).output.size() * s);
        if (l == 0 && batch_source) continue;
        if (options.remat == Remat::Never) widest_input = std::max(widest_input, layer(l).input.size());
        else activations.add(shard * layer(l).input.size() * s);
      }
      if (widest_input > 0) activations.add(shard * widest_input * s);
      // A grouped W (pipeline.w_group): one stacked input (the widest of
      // those layers but stage 0's first) and one stacked output gradient
      // (the widest), plan.weight_group micro-batches of rows each.
      if (plan.weight_group > 1) {
        std::int64_t group_in = 0, group_out = 0;
        for (int l = 0; l < count; ++l) {
          if (!(splits(l) && layer(l).entry->whole_batch_weights)) continue;
          group_out = std::max(group_out, layer(l).output.size());
          if (!(l == 0 && batch_source)) group_in = std::max(group_in, layer(l).input.size());
        }
        activations.add_if(plan.weight_group * rows * group_in * s);
        activations.add_if(plan.weight_group * rows * group_out * s);
      }
      for (int slot = 0; slot < plan.micro_batch.slots; ++slot) {
        if (!batch_source) boundary(activations, rows * in);  // the received input
        if (!loss_sink) {
          boundary(activations, rows * out_width);        // the output sent on
          boundary(gradient_buffers, rows * out_width);  // its gradient received
        } else {
          gradient_buffers.add(rows * out_width * s);  // the logit gradient
        }
        activations.add_if(saved(count - 1));
      }
      if (!batch_source)
        for (int slot = 0; slot < plan.input_grad.slots; ++slot) boundary(gradient_buffers, rows * in);
      if (loss_sink) activations.add(rows * out_width * s);  // the logits
      for (int slot = 0; slot < plan.weight_grad.slots; ++slot)
        for (int l = 0; l + 1 < count; ++l)
          if (splits(l)) activations.add(rows * layer(l).output.size() * v);
      for (int slot = 0; slot < plan.activations.slots; ++slot)
        for (int l = 0; l + 1 < count; ++l) {
          activations.add(rows * layer(l).output.size() * v);
          activations.add_if(saved(l));
        }
      gradient_buffers.add(rows * widest * s);  // the backward's ping-pong pair
      gradient_buffers.add(rows * widest * s);
      if (storage16) {  // the float buffer a 16-bit layer input is unpacked into
        std::int64_t widest_input = 0;
        for (int l = 0; l < count; ++l) widest_input = std::max(widest_input, layer(l).input.size());
        gradient_buffers.add(rows * widest_input * s);
      }
      // The loss's buffers (Loss::reserve): softmax cross-entropy a double
      // loss and an int32 hit per row (token cross-entropy: per token) and
      // its totals (an exact sum of kExactWords int64 words, hits, bad
      // labels); regression 4 exact sums per output + the loss's.
      if (loss_sink && deck.model.loss.regression()) {
        workspaces.add((4 * out_width + 1) * kExactWords * 8);
      } else if (loss_sink) {
        const std::int64_t per_row = deck.model.loss.tokens() ? deck.model.labels_per_sample() : 1;
        workspaces.add((kExactWords + 2) * 8);
        workspaces.add(rows * per_row * 8);
        workspaces.add(rows * per_row * 4);
      }
      // Pipeline's mini-batch staging: the inputs where stage 0 runs, the
      // int32 labels (one per token) or float targets where the loss is.
      if (batch_source) staging.add(shard * deck.model.input_features * s);
      if (loss_sink)
        staging.add(deck.model.loss.regression()
                        ? shard * deck.model.classes() * s
                        : shard * std::max<std::int64_t>(deck.model.labels_per_sample(), 1) * 4);
    }
    // Tied embeddings (layers/tied.hpp): on one rank the head's values are
    // the embedding's (one matrix: parameters and optimizer state hold it
    // once, the gradients keep the head's slot); on two, each of the two
    // cells holds the other's V x d slice for the exchange (Pipeline's
    // tied_peer, allocated once: counted with its staging).
    std::int64_t values = params;
    if (tied.tied()) {
      const int re = schedule.rank_of_stage.at(size_t(stage_of(tied.embedding)));
      const int rh = schedule.rank_of_stage.at(size_t(stage_of(tied.head)));
      const std::int64_t matrix = shapes[size_t(tied.embedding)].parameter_count();
      if (re == k && rh == k) values -= matrix;
      else if (re == k || rh == k) staging.add(matrix * s);
    }
    CellMemory c;
    // One flat parameter, gradient and state buffer per rank (Runner).
    c.parameters = view_bytes(values * s);
    c.gradients = view_bytes(params * s);
    c.layer_state = view_bytes(state * s);
    // SGD keeps its velocity at any momentum; Adam and AdamW two moments.
    c.optimizer = (deck.optimizer.type == "sgd" ? 1 : 2) * view_bytes(values * s);
    c.activations = activations.bytes;
    c.gradient_buffers = gradient_buffers.bytes;
    // The cublas implementation's workspace, one per stream (the default
    // instance: one per process), made at the first GEMM it runs; a conv2d
    // on cuDNN is in the layer's workspace (its registry entry asks cuDNN).
    const auto on_cublas = [&](kernels::Primitive p) {
      return kernels::implementation(p, int(s)) == kernels::Implementation::cublas;
    };
    if (gemm_layers && (on_cublas(kernels::Primitive::gemm) || on_cublas(kernels::Primitive::gemm_bias) ||
                        on_cublas(kernels::Primitive::batched_gemm)))
      workspaces.add(kernels::cublas_workspace_bytes());
    c.workspaces = workspaces.bytes;
    // bf16 / fp16: the copy of the rank's weights the primitives read,
    // refreshed after each step (kernels::WeightCopy): bf16 values with
    // oneDNN's bf16 GEMM, else (the rounded route) fp32 values rounded.
    if (precision.reduced() && params > 0) c.weight_copy = view_bytes(params * (bf16_onednn ? 2 : 4));
    if (scratch_a > 0) c.seam_scratch = view_bytes(scratch_a * (bf16_onednn ? 2 : 4));
    if (scratch_b > 0) c.seam_scratch += view_bytes(scratch_b * (bf16_onednn ? 2 : 4));
    if (scratch_x > 0) c.seam_scratch += view_bytes(scratch_x * 4);
    if (scratch_dy > 0) c.seam_scratch += view_bytes(scratch_dy * 4);
    if (held_x > 0) c.seam_reuse = view_bytes(held_x * 2);
    if (held_dy > 0) c.seam_reuse += view_bytes(held_dy * 2);
    c.seam_scratch += c.seam_reuse;
    c.staging = staging.bytes;
    if (D > 1 && deck.parallel.deterministic_reduction) c.reduction = view_bytes(std::int64_t(D) * params * s);
    // Transient, in a step's tail: the clipping's per-layer bounds (int64) and sums (double).
    if (deck.optimizer.clip_norm > 0)
      c.transient = view_bytes((layers_on_rank + 1) * 8) + view_bytes(layers_on_rank * 8);
    out.push_back(c);
  }
  return out;
}

void check_memory_budget(const std::vector<CellMemory>& cells, std::int64_t budget, const GridShape& grid) {
  if (budget <= 0) return;
  for (int k = 0; k < int(cells.size()); ++k) {
    const CellMemory& c = cells[size_t(k)];
    if (c.total() <= budget) continue;
    std::vector<int> ranks;
    for (int r = 0; r < grid.replicas; ++r) ranks.push_back(grid.rank_of(r, k));
    throw InputError(fmt::format(
        "pipeline.memory_budget: cell {} ({} {}) needs {} ({} bytes), more than the budget of {} ({} bytes) per "
        "rank: parameters {}, gradients {}, optimizer state {}, layer state {}, activations {}, gradient buffers "
        "{}, workspaces {}, staging {}, reduction {}, clipping {}, bf16 weight copy {}, seam scratch {}; use more "
        "cells (ranks), "
        "pipeline.remat: always, or more micro-batches",
        k, ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "), format_bytes(c.total()), c.total(),
        format_bytes(budget), budget, format_bytes(c.parameters), format_bytes(c.gradients),
        format_bytes(c.optimizer), format_bytes(c.layer_state), format_bytes(c.activations),
        format_bytes(c.gradient_buffers), format_bytes(c.workspaces), format_bytes(c.staging),
        format_bytes(c.reduction), format_bytes(c.transient), format_bytes(c.weight_copy),
        format_bytes(c.seam_scratch)));
  }
}

}  // namespace gpipe

#pragma once
// The buffer plan: from a Schedule, which per-micro-batch buffers of a cell
// are live from which op to which op, the slot of a pool each micro-batch
// uses, and how many slots (the peak) each pool needs. A pure function of the
// schedule: the Cell allocates its slots from it and its activation-byte
// accounting multiplies the same slot counts by the slot sizes, so the
// reported bytes are exactly what is allocated (docs/design.md, "Buffer plan").

#include <cstdint>
#include <vector>

#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// Micro-batches' intervals [first op, last op] (indices into one cell's op
/// list, inclusive) packed into slots: two micro-batches share a slot only
/// if their intervals do not overlap.
struct BufferPool {
  int slots = 0;           ///< slots allocated (the peak number of overlapping intervals)
  std::vector<int> slot;   ///< [m] slot of micro-batch m (-1: the pool is not used by m)
  std::vector<int> first;  ///< [m] op index where m's interval starts (-1: none)
  std::vector<int> last;   ///< [m] op index where it ends
  /// [m] op index after which m's slot is free for it (the previous
  /// occupant's last op; -1: free at the start of the step). Receives into
  /// the slot are posted there, so no receive ever needs a buffer the plan
  /// does not have.
  std::vector<int> free_after;
};

/// One cell's plan. Interval of each pool for micro-batch m:
/// A split backward's BackwardInput(m) (I) stands for Backward(m) below,
/// and every interval that would end at it ends at BackwardWeights(m) (W)
/// instead when W comes later: W reads the layer inputs, the saved state
/// and the output gradients, so all of them live until it has run.
///  - micro_batch: [Forward(m), last Backward op of m] (the whole step when
///    forward-only ends at Forward(m)): the received cell input, the cell
///    output (send buffer, waited at m's Backward, by when its receiver has
///    consumed it), the received output gradient or the logit gradient, and
///    the last layer's saved state (a recompute does not rerun that layer).
///  - activations: [Forward(m), Backward(m)] for kept micro-batches;
///    re-materialized ones hold a slot for Forward(m) alone and again for
///    [Recompute(m), Backward(m)] (forward_slot and backward_slot differ):
///    the outputs of layers 0..L_k-2 and their saved state.
///  - input_grad: [Backward(m), the cell's next backward op]: dL/dinput send
///    buffer, waited before its slot is reused (its receive was posted at the
///    receiver's Forward(m), so the wait cannot block on the receiver's
///    progress). Two slots whenever the cell runs two or more backwards, so
///    a backward never waits for the previous one's gradient to leave.
///  - weight_grad: [BackwardInput(m), BackwardWeights(m)]: the output
///    gradients of the splitting layers 0..L_k-2 (dL/dy of the cell's last
///    layer is the micro_batch slot's received gradient). Unused (0 slots)
///    by schedules without W ops.
///  - BatchWeights: without re-materialization the micro_batch and
///    activations intervals of every micro-batch extend to it (it reads
///    their kept inputs); its own buffers (SlotBytes::batch_weights) are
///    allocated once when the stage runs it.
///  - a grouped W (BackwardWeights with Op::count > 1) ends the intervals of
///    every micro-batch it covers, as W(m) does for one; its stacking
///    buffers (SlotBytes::weight_group per micro-batch of the largest group)
///    are allocated once.
struct CellBufferPlan {
  int batch_weights = -1;  ///< op index of the stage's BatchWeights op (-1: none)
  /// The most micro-batches one of the stage's W ops covers (Op::count; 1:
  /// no grouped W): the grouped W's stacking buffers hold that many micro-batches.
  int weight_group = 1;
  BufferPool micro_batch;
  BufferPool activations;       ///< intervals of kept micro-batches and recomputes
  std::vector<int> forward_slot;  ///< [m] activations slot Forward(m) writes
  BufferPool input_grad;
  BufferPool weight_grad;
};

/// The plan of stage `stage` of `schedule` (global stage index; with one
/// stage per rank, the cell): its ops are those of rank
/// schedule.rank_of_stage[stage] naming the stage (all of that rank's when
/// rank_of_stage is empty), and the op indices above are positions in that
/// rank's list (so receives are posted between the rank's ops). Slots are
/// assigned greedily in op order (lowest free slot), which needs exactly the
/// peak number of overlapping intervals. Throws InputError when the stage's
/// ops do not run Forward(m) before any other op of m, run
/// BackwardWeights(m) before BackwardInput(m), cover micro-batches outside
/// 0..M-1 or more than one with an op other than W, or `stage` is outside
/// the stage map. This is the one buffer planner: the Stage, the memory
/// model, gpipe-plan and the schedule-memory helpers all call it.
CellBufferPlan plan_buffers(const Schedule& schedule, int stage);

/// Bytes of one slot of each pool (micro-batches of the largest size).
struct SlotBytes {
  std::int64_t micro_batch = 0;  ///< counted part of a micro_batch slot (input, output, last saved)
  std::int64_t activations = 0;  ///< outputs of layers 0..L_k-2 + their saved state
  std::int64_t input_grad = 0;   ///< dL/dinput send buffer (0: not counted)
  std::int64_t fixed = 0;        ///< buffers independent of the schedule (last cell's logits)
  std::int64_t weight_grad = 0;  ///< output gradients kept for the W op (splitting layers 0..L_k-2)
  std::int64_t batch_weights = 0;  ///< the whole-batch W's stacked buffers (counted when the plan has a BatchWeights op)
  /// The grouped W's stacking buffers per micro-batch of a group (counted
  /// weight_group times when weight_group > 1): the widest stacked input and
  /// the widest output gradient of the stage's whole_batch_weights layers.
  std::int64_t weight_group = 0;
};

/// Bytes the plan allocates: sum over pools of slots x slot bytes, plus fixed,
/// batch_weights (with a BatchWeights op) and weight_group x
/// bytes.weight_group (with a grouped W).
std::int64_t planned_bytes(const CellBufferPlan& plan, const SlotBytes& bytes);

}  // namespace gpipe

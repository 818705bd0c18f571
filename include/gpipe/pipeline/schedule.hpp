#pragma once
// Pipeline schedules as data: for each cell, the ordered list of operations
// it runs in one step. A generic cell runner executes any such list, so a new
// schedule (e.g. 1F1B) is a new generator, not a new runner.

#include <string>
#include <vector>

namespace gpipe {

/// Re-materialization (activation checkpointing, GPipe sec. 2.3).
enum class Remat {
  Never,       ///< keep every layer's activations of every micro-batch
  Always,      ///< keep only each micro-batch's cell input; recompute before backward
  ExceptLast,  ///< like Always, but the last micro-batch (whose backward runs next) keeps its activations
};

/// Parses "never" | "always" | "except_last"; throws InputError naming `field`.
Remat parse_remat(const std::string& text, const std::string& field);
std::string to_string(Remat remat);

/// Which schedule a training step runs (deck `pipeline.schedule`).
enum class ScheduleKind {
  FillDrain,  ///< GPipe: all forwards, then all backwards (Huang et al. 2019, Fig. 2c)
  OneFOneB,   ///< PipeDream-flush 1F1B (Narayanan et al. 2021): at most K - k micro-batches in flight on cell k
  ZeroBubble, ///< ZB-H1 (Qi et al. 2023): backward split into B and W, W ops fill the drain bubble
  ZbV,        ///< ZB-V (Qi et al. 2024, sec. 6): 2 stages per rank in a V, B/W split (pipeline/schedule_v.hpp)
  DualPipeV,  ///< DualPipeV (deepseek-ai/DualPipe): 2 stages per rank in a V (pipeline/schedule_v.hpp)
};

/// Parses "fill_drain" | "1f1b" | "zero_bubble" | "zb_v" | "dualpipe_v";
/// throws InputError naming `field`.
ScheduleKind parse_schedule(const std::string& text, const std::string& field);
std::string to_string(ScheduleKind kind);

enum class OpKind {
  Forward,    ///< receive input (or take it from the batch), run the cell's layers, send output (or loss)
  Recompute,  ///< re-run the forward of a re-materialized micro-batch from its kept input
  Backward,   ///< receive output gradient (or loss gradient), run backward, send input gradient
  /// B of a split backward: like Backward, but layers that split
  /// (Layer::splits_backward) compute only dL/dinput; their parameter
  /// gradients wait for the BackwardWeights op of the same micro-batch.
  BackwardInput,
  /// W of a split backward: the parameter gradients of the layers that
  /// split, from the kept layer inputs and output gradients. No communication.
  BackwardWeights,
};

/// One letter per kind for messages and tests: F, R, B (fused), I (B of a split), W.
char op_letter(OpKind kind);

struct Op {
  OpKind kind;
  int micro_batch;
  /// The stage this op runs (global index 0..Schedule::stages-1; its rank is
  /// Schedule::rank_of_stage[stage]). With one stage per rank, the rank.
  int stage = 0;
  bool operator==(const Op& other) const {
    return kind == other.kind && micro_batch == other.micro_batch && stage == other.stage;
  }
};

struct Schedule {
  int cells = 0;          ///< ranks of one pipeline (K)
  int stages = 0;         ///< stages of the partition: K with one stage per rank, K x v with v chunks
  int micro_batches = 0;
  /// The stage map: stage s runs on rank rank_of_stage[s]; stage s's input
  /// comes from stage s - 1 (or the batch) and its output goes to stage s + 1
  /// (or the loss). One stage per rank: the identity.
  std::vector<int> rank_of_stage;
  /// Per micro-batch: true if its forward keeps only the cell input.
  std::vector<bool> rematerialized;
  /// Per rank, the operations in execution order.
  std::vector<std::vector<Op>> ops;
};

/// GPipe fill-drain: every cell runs F(0..M-1), then for m = M-1..0 an
/// optional Recompute(m) and B(m) (GPipe Fig. 2c).
Schedule fill_drain(int cells, int micro_batches, Remat remat);

/// PipeDream-flush 1F1B: cell k runs a warm-up of min(M, K - k - 1)
/// forwards, then alternates one forward and one backward (each backward
/// preceded by its Recompute when re-materialized), then the cool-down
/// backwards. Backwards run in micro-batch order 0..M-1 (fill_drain: M-1..0),
/// so gradients accumulate in the opposite order (equal to fill_drain within
/// rounding, not bitwise; docs/design.md, "Schedules").
Schedule one_f_one_b(int cells, int micro_batches, Remat remat);

/// Zero bubble ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism",
/// sec. 3.1, with T_F = T_B = T_W): backward split into BackwardInput (I)
/// and BackwardWeights (W) ops. Cell k runs the 1F1B warm-up of
/// w = min(M, K - k - 1) forwards, then F(m + w), I(m) pairs as 1F1B does,
/// but its W ops lag d = k micro-batches behind its I ops: W(m - d) after
/// I(m) once m >= d; in the cool-down each I is followed by the oldest
/// pending W, and the remaining W ops end the step. Only I is on the backward critical path, and each
/// cell's deferred W ops run while later cells drain, so with equal op
/// times the idle fraction is (K-1)/(3M+K-1) instead of 1F1B's
/// (K-1)/(M+K-1). In flight (F(m) run, W(m) not yet): w + 1 + d = K
/// micro-batches on every cell (1F1B: K - k), so the peak over cells equals
/// 1F1B's (cell 0's). I and W ops each run in micro-batch order 0..M-1 on
/// every cell, the order 1F1B's backwards run in, so parameter gradients
/// accumulate in the same order as 1F1B's (bitwise equal weights).
/// Re-materialization: Recompute(m) right before I(m).
Schedule zero_bubble(int cells, int micro_batches, Remat remat);

/// Idle fraction of a step of `kind` with balanced cells and, for
/// zero_bubble, equal F, B and W times: (K-1)/(M+K-1) for fill_drain and
/// 1f1b; (K-1)/(3M+K-1) for zero_bubble (ZB-H1's bubble (K-1)(T_F+T_B-T_W)
/// over a step of M(T_F+T_B+T_W) busy time per cell, Qi et al. 2023 sec. 3.1).
/// zb_v and dualpipe_v (balanced stages, F = I = W per stage): see
/// pipeline/schedule_v.hpp (bubble_fraction_v).
double bubble_fraction(ScheduleKind kind, int cells, int micro_batches);

/// The training schedule of `kind`.
Schedule make_schedule(ScheduleKind kind, int cells, int micro_batches, Remat remat);

/// Forward-only schedule for evaluation: F(0..M-1) on every cell.
Schedule forward_only(int cells, int micro_batches);

}  // namespace gpipe

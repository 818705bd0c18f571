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
  /// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, sec. 2.2): v
  /// chunks (virtual stages) per rank, stage s on rank s mod K.
  Interleaved1F1B,
  ZbV,        ///< ZB-V (Qi et al. 2024, sec. 6): 2 stages per rank in a V, B/W split (pipeline/schedule_v.hpp)
  DualPipeV,  ///< DualPipeV (deepseek-ai/DualPipe): 2 stages per rank in a V (pipeline/schedule_v.hpp)
};

/// Parses "fill_drain" | "1f1b" | "zero_bubble" | "interleaved_1f1b" | "zb_v" |
/// "dualpipe_v"; throws InputError naming `field`.
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
  /// A grouped W (Op::count > 1, pipeline.w_group) covers micro-batches
  /// micro_batch .. micro_batch + count - 1 at once: the layers whose
  /// Layer::whole_batch_weights() is true run one weight-gradient pass over
  /// the group's rows stacked in micro-batch order (one GEMM instead of
  /// count), the other splitting layers one pass per micro-batch in order.
  BackwardWeights,
  /// Whole-batch W (fill_drain, M > 1): the weight gradients of the stage's
  /// layers whose Layer::whole_batch_weights() is true, once over the n rows
  /// of the step (one GEMM instead of M; docs/design.md, "Whole-batch W"),
  /// after the stage's last Backward; those layers' Backward ops compute only
  /// dL/dinput and stack dL/dy (and, re-materialized, the input) for it.
  /// Its micro_batch is that of the stage's last Backward (0 for
  /// fill_drain), the micro-batch its trace event carries. No communication.
  BatchWeights,
};

/// One letter per kind for messages and tests: F, R, B (fused), I (B of a
/// split), W, G (whole-batch W).
char op_letter(OpKind kind);

struct Op {
  OpKind kind;
  int micro_batch;
  /// The stage this op runs (global index 0..Schedule::stages-1; its rank is
  /// Schedule::rank_of_stage[stage]). With one stage per rank, the rank.
  int stage = 0;
  /// Micro-batches the op covers: micro_batch .. micro_batch + count - 1
  /// (consecutive). 1 for every op but a grouped W (BackwardWeights with
  /// count > 1; group_weights, pipeline.w_group).
  int count = 1;
  /// One past the last micro-batch the op covers.
  int end() const { return micro_batch + count; }
  bool operator==(const Op& other) const {
    return kind == other.kind && micro_batch == other.micro_batch && stage == other.stage && count == other.count;
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
/// optional Recompute(m) and B(m) (GPipe Fig. 2c), then, when M > 1, one
/// BatchWeights op (micro_batch 0): the whole-batch weight gradient.
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

/// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, "Efficient
/// Large-Scale Language Model Training on GPU Clusters", sec. 2.2; the
/// schedule of Megatron-LM's forward_backward_pipelining_with_interleaving):
/// K x v stages, stage s on rank s mod K (rank k holds chunks k, k + K, ...).
/// On each rank the forwards run in groups of K micro-batches per chunk
/// (virtual micro-batch j: micro-batch (j / (K v)) K + j mod K, chunk
/// (j / K) mod v), the backwards in the same order with the chunks reversed;
/// rank k runs a warm-up of min(M v, (K - k - 1) 2 + (v - 1) K) forwards,
/// then one forward and one backward alternately, then the cool-down
/// backwards. Idle fraction with balanced stages (K-1)/(v M + K - 1) (the
/// bubble (K-1)/(v M) of the ideal step). Needs M a multiple of K when v > 1
/// (throws InputError naming training.micro_batches otherwise); v = 1 is
/// one_f_one_b. Backwards of each stage run in micro-batch order 0..M-1, as
/// 1f1b's do (bitwise the same weights). Re-materialization: Recompute right
/// before each backward.
Schedule interleaved_one_f_one_b(int cells, int chunks, int micro_batches, Remat remat);

/// Idle fraction of a step of `kind` with balanced cells and, for
/// zero_bubble, equal F, B and W times: (K-1)/(M+K-1) for fill_drain and
/// 1f1b; (K-1)/(3M+K-1) for zero_bubble (ZB-H1's bubble (K-1)(T_F+T_B-T_W)
/// over a step of M(T_F+T_B+T_W) busy time per cell, Qi et al. 2023 sec. 3.1).
/// interleaved_1f1b with v `chunks`: (K-1)/(v M + K - 1).
/// zb_v and dualpipe_v (balanced stages, F = I = W per stage): see
/// pipeline/schedule_v.hpp (bubble_fraction_v).
double bubble_fraction(ScheduleKind kind, int cells, int micro_batches, int chunks = 1);

/// The training schedule of `kind` (chunks: v for interleaved_1f1b; the
/// others take 1 and throw InputError naming pipeline.chunks otherwise).
Schedule make_schedule(ScheduleKind kind, int cells, int micro_batches, Remat remat, int chunks = 1);
/// make_schedule followed by group_weights(schedule, w_group) (throws as both do).
Schedule make_schedule(ScheduleKind kind, int cells, int micro_batches, Remat remat, int chunks, int w_group);

/// Grouped W (deck pipeline.w_group = `group`): `schedule` with each
/// stage's BackwardWeights ops, taken in their order on the stage's rank,
/// merged `group` at a time into one W op of count up to `group` (a group
/// ends early where the next W's micro-batch is not the previous one's + 1,
/// and at the stage's last W), placed where the group's last W was. Only W
/// ops move, and only later, so every dependency of the schedule still
/// holds; the buffer plan keeps each member's inputs and output gradients
/// until the group's W. group = 1 returns `schedule` unchanged. The grouped
/// weight gradient sums each group in one GEMM instead of count, so the
/// weights equal the ungrouped schedule's up to the rounding of that sum's
/// order (docs/design.md, "Grouped W"). Throws InputError naming
/// pipeline.w_group for group < 1, and for group > 1 with a schedule that
/// has no W ops (fill_drain, whose whole-batch W is already one GEMM, 1f1b,
/// interleaved_1f1b).
Schedule group_weights(const Schedule& schedule, int group);

/// Forward-only schedule for evaluation: F(0..M-1) on every cell.
Schedule forward_only(int cells, int micro_batches);
/// Forward-only schedule on the stage map of `training` (its cells, stages
/// and rank_of_stage): each rank runs, for m = 0..M-1, F(m) of each of its
/// stages in increasing stage order.
Schedule forward_only(const Schedule& training, int micro_batches);

/// The stages rank `rank` of `schedule` runs, in increasing order.
std::vector<int> stages_of_rank(const Schedule& schedule, int rank);

}  // namespace gpipe

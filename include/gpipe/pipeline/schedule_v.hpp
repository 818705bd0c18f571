#pragma once
// Schedules with two stages (chunks) per rank in a V, and the greedy
// zero-bubble scheduler behind them and behind `gpipe-plan --tune`
// (docs/design.md, "Schedules"). Pure functions of their arguments.

#include <vector>

#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// The V stage map of 2K stages on K ranks: stage s on rank s for s < K and
/// on rank 2K-1-s otherwise (rank K-1 runs stages K-1 and K back to back;
/// rank 0 runs the first and the last stage).
std::vector<int> v_stage_map(int cells);

/// Inserts Recompute(m) right before the backward op (B or I) of every
/// re-materialized micro-batch m, on every stage.
void insert_recomputes(Schedule& schedule);

/// What the greedy zero-bubble scheduler is given, per stage (times per
/// micro-batch in seconds, or any unit), and its limits.
struct GreedyInput {
  int cells = 0;
  int micro_batches = 0;
  std::vector<int> rank_of_stage;          ///< the stage map (its size: the stages)
  std::vector<double> forward;             ///< [stage] F time
  std::vector<double> backward_input;      ///< [stage] I (B of the split) time
  std::vector<double> backward_weights;    ///< [stage] W time
  /// [stage] activation units one micro-batch holds on its stage from the
  /// start of F(m) to the end of W(m) (e.g. bytes, or 1 per stage).
  std::vector<double> activation;
  /// [rank] limit on the sum of held activation units (<= 0: none). A rank
  /// starts an F only when it stays within the limit; when it cannot, it
  /// runs W ops (which free memory) first.
  std::vector<double> memory_limit;
  double message_s = 0;  ///< delay of a message between stages on different ranks
  /// W policy: false = a rank with nothing else ready runs a pending W at
  /// once (fills every gap); true = only when no I or F becomes ready within
  /// that W's time (never delays a known arrival).
  bool w_only_in_gaps = false;
};

/// The greedy list scheduler of the zero-bubble paper's heuristic (Qi et
/// al. 2024, "Zero Bubble Pipeline Parallelism", sec. 3.1), as an
/// event-by-event simulation: at each time the earliest free rank runs, in
/// this priority, a ready I (smallest micro-batch, then highest stage), a
/// ready F within the memory limit (highest stage, then smallest
/// micro-batch), or a pending W (oldest first), else waits for the next
/// arrival. F and I of a stage run in micro-batch order 0..M-1 and W ops in
/// their I order, so every stage accumulates its parameter gradients in
/// micro-batch order 0..M-1 (1F1B's order). The op lists are the execution
/// order, so every op starts after its dependencies: the result passes
/// check_schedule. Schedule::rematerialized is all false. Throws
/// InputError when sizes disagree or a memory limit is below one stage's
/// activation (no F could ever start).
Schedule greedy_zero_bubble(const GreedyInput& input);

/// ZB-V (Qi et al. 2024, "Zero Bubble (Almost) Pipeline Parallelism", ICLR,
/// sec. 6; sail-sg/zero-bubble-pipeline-parallelism): 2K stages in the V map
/// (v_stage_map), the backward split into I and W, at 1F1B's memory: at
/// most 2K stage micro-batches held per rank (K micro-batches of a rank's
/// layers; the paper's max_mem = 2K f_mem). For M >= 2K - 1: the paper's
/// ZB-V op order (as torch.distributed.pipelining's ScheduleZBVZeroBubble):
/// rank r runs 2(K-r)-1 x F0, r x (F1 F0), K-r x (F1 I1 W1), then
/// [F0] I0 W0 F1 I1 W1 until chunk 1's forwards are done, then r x (I0 I1),
/// K-r x (I0 W0) and the remaining W1, W0 (chunk 0 = stage r, chunk 1 =
/// stage 2K-1-r). With F = I = W per stage (simulate_step, unit times) it
/// idles exactly (K-1)/(6M+K-1) at every K (ScheduleV.BubbleWithEqualOpTimes).
/// For M < 2K - 1 (ZB-V's warm-up does not fit): greedy_zero_bubble with
/// T_F = T_I = T_W, no message delay and that memory limit.
/// Why not the greedy for every M (it was, until issue 23's emulated runs):
/// at zero message delay it ties ZB-V up to K = 8 and loses at K = 16
/// (19/211 against 15/207 at M = 32), and it runs every I the instant its
/// gradient arrives, so 337 of its cross-rank messages at K = 8, M = 16 are
/// consumed with zero slack (ZB-V: 238): each hop's delay lands on the step.
/// Simulated with a hop delay of 0.1 op: idle 0.141 (greedy) against 0.097
/// (ZB-V) at K = 8, M = 16 (ScheduleV.ZbVAbsorbsAHopDelay).
/// Held stage micro-batches: plan_buffers(schedule, stage) / peak_held.
/// Re-materialization: Recompute right before I (insert_recomputes).
Schedule zb_v(int cells, int micro_batches, Remat remat);

/// DualPipeV (deepseek-ai/DualPipe, dualpipe/dualpipev.py, DualPipeV.step,
/// the "cut-in-half" DualPipe of Sea AI Lab): 2K stages in the V map,
/// phase 0 = stage r, phase 1 = stage 2K-1-r on rank r, its eight steps
/// transcribed to op order: (1) 2(K-r-1) F0; (2) r+1 x (F0, F1); (3) K-r-1
/// x (I1, W, F1); (4) M-2K+r+1 x (F0, B1, F1, B0); (5) K-r-1 x (B1, F1,
/// B0); (6) r+1 x (B1, B0), the backwards from the (r+1)-th of these 2(r+1)
/// on split (I, W deferred); (7) K-r-1 x (W, I0); (8) r+1 x W. Deferred W
/// ops run oldest first (DualPipe's WeightGradStore queue). Each "F&B" of
/// the reference (steps 4 and 5: a forward chunk overlapped with a fused
/// backward chunk of the other phase) is here F then B in one rank's op
/// order: their computations are not overlapped (one execution space per
/// rank); what stays overlapped is communication, since every send is
/// non-blocking and the receives are posted ahead. Requires M >= 2K (as the
/// reference asserts); throws InputError naming pipeline.micro_batches
/// otherwise. DualPipe's bubble (README, PP = 2K stages): (PP/2-1)(F&B + B
/// - 3W) with B the fused backward; with F&B = F + B (no overlap) and F = I
/// = W = t that bound is 2(K-1)t; the op lists simulated with unit times
/// (simulate_step) idle exactly (K-1)t per rank over 6Mt of work: an idle
/// fraction of (K-1)/(6M+K-1) for every K and M >= 2K tested
/// (ScheduleV.BubbleWithEqualOpTimes, K = 2..16).
Schedule dualpipe_v(int cells, int micro_batches, Remat remat);

/// Idle fraction of zb_v or dualpipe_v (`kind`) with balanced stages and F
/// = I = W per stage, as simulate_step measures it (the mean over ranks of
/// idle / step): (K-1)/(6M+K-1) for both (see each generator's comment for
/// where it holds exactly).
double bubble_fraction_v(ScheduleKind kind, int cells, int micro_batches);

}  // namespace gpipe

#pragma once
// The schedule checker: proves, before any traffic, that a Schedule's op
// lists can run (every op once, each op's dependencies satisfiable in op
// order, no deadlock across ranks). Pure: no MPI, no Kokkos.

#include <string>

#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// "I(3) of stage 5": an op as the checker's messages name it (op_letter,
/// micro-batch, global stage index); a grouped W "W(4..7) of stage 1".
std::string to_string(const Op& op);

/// Checks `schedule` against the stage contract (docs/design.md, "Schedules",
/// "The schedule checker") and throws InputError naming the first bad op as
/// "<source>: rank R, op I (X(m) of stage s): <reason>" (R the rank, I the
/// 0-based position in that rank's list), or "<source>: <field>: ..." for a
/// malformed stage map or size. Rules:
///  - shape: cells >= 1, stages >= cells, micro_batches >= 1,
///    rank_of_stage has `stages` entries in [0, cells) and gives every rank
///    at least one stage, `ops` has `cells` lists, `rematerialized` has M,
///    and stages x micro_batches is at most the number of ops (each
///    (stage, micro-batch) needs an F op of its own): "<source>: stages x
///    micro_batches: S x M = P (stage, micro-batch) pairs, more than the
///    schedule's N ops (the limit: ...); rank R never runs F(m) of stage s".
///    These come first, so every table the checker allocates is bounded by
///    the lists the schedule holds, never by its numbers alone (a file's
///    huge stages or micro_batches fail instead of exhausting memory);
///  - every op: micro-batch in [0, M), stage in [0, stages), on the rank the
///    stage map gives its stage; only a W op covers more than one
///    micro-batch (Op::count >= 1, all of them in [0, M); a grouped W counts
///    as the W of each micro-batch it covers in every rule below); no
///    (stage, kind, micro-batch) twice; a
///    stage-micro-batch runs either Backward or the split pair
///    BackwardInput + BackwardWeights, never both;
///  - local order on the op's rank: Recompute(m) after Forward(m) and only
///    for a re-materialized m; Backward/BackwardInput(m) after Forward(m) and
///    after Recompute(m) when m is re-materialized; BackwardWeights(m) after
///    BackwardInput(m); a dependency on a stage of the same rank (the V's
///    turn, or v consecutive chunks) must come earlier in that rank's list;
///  - completeness: with any backward op in the schedule (training), every
///    stage runs Forward, a backward (B, or I and W) and, when
///    re-materialized, Recompute of every micro-batch; otherwise
///    (forward-only) Forward of every micro-batch. A missing op is named as
///    "<source>: rank R never runs X(m) of stage s";
///  - no deadlock: the ranks run their lists in order; Forward(m) of stage s
///    > 0 waits for Forward(m) of stage s-1 and Backward/BackwardInput(m) of
///    stage s < stages-1 for the backward of stage s+1 (receives block until
///    the matching send has run; sends do not block: the runner's sends are
///    non-blocking and their buffers come from the buffer plan). When no rank
///    can proceed, the lowest blocked rank's op is named with what it waits
///    for and where that rank is stuck.
/// Not collective. Cost: O(ops x ranks) time at most (the deadlock
/// simulation sweeps the ranks until none advances), O(ops) memory (the
/// position table, 6 x stages x micro_batches entries, after the bound above).
void check_schedule(const Schedule& schedule, const std::string& source = "schedule");

}  // namespace gpipe

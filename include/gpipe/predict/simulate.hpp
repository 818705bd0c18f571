#pragma once
// The event-by-event simulation of one training step behind gpipe-plan: the
// very op lists the runner executes (pipeline/schedule.hpp), with given op
// durations, boundary message sizes and link parameters, replayed on K
// simulated cells. Pure: no MPI, no Kokkos, no clock (docs/performance-model.md).

#include <cstdint>
#include <vector>

#include "gpipe/pipeline/link.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// Seconds one op of one micro-batch runs on one cell.
struct OpSeconds {
  double forward = 0;           ///< F
  double recompute = 0;         ///< R (the forward of layers 0..c-2: a recompute stops before the last)
  double backward = 0;          ///< B, fused backward
  double backward_input = 0;    ///< I, input-gradient part of a split backward
  double backward_weights = 0;  ///< W, weight-gradient part of a split backward (a grouped W: this micro-batch's share)
  /// G, the whole-batch W (BatchWeights), on the entry of its op's micro-batch.
  double batch_weights = 0;
  /// The duration of an op of `kind` covering one micro-batch.
  double of(OpKind kind) const;
};

/// One gradient bucket of a cell (parallel/gradient_reducer.hpp): its bytes,
/// and when it is final: `offset_s` seconds after the start of op `op` (an
/// index into the cell's op list), the op whose backward through the
/// bucket's lowest layer makes it final.
struct BucketSpec {
  std::int64_t bytes = 0;
  int op = 0;
  double offset_s = 0;
};

/// Everything one step's simulation needs.
struct StepInput {
  Schedule schedule;  ///< the op lists (make_schedule)
  /// [stage][micro-batch]: op durations, seconds (one stage per cell: [cell]).
  std::vector<std::vector<OpSeconds>> seconds;
  /// [boundary b = 0..stages-2][micro-batch]: bytes of micro-batch m's
  /// activation sent by stage b to stage b+1 in its F op; its gradient, sent
  /// back by stage b+1's B or I op, has the same size. Between two stages of
  /// one rank (the schedule's stage map) nothing crosses a wire: the message
  /// arrives when it is sent.
  std::vector<std::vector<std::int64_t>> boundary_bytes;
  /// [stage]: bytes one micro-batch (the largest) keeps on its stage from
  /// F(m) to its last op, estimated as its layers' outputs (what
  /// gpipe-plan --tune limits; not used by simulate_step). May be empty.
  std::vector<std::int64_t> activation_bytes;
  /// Point-to-point link between ranks; each direction of each pair of
  /// ranks is one Wire (pipeline/link.hpp): a message handed over at s
  /// arrives at max(s, wire free) + bytes / bandwidth + latency. Disabled
  /// (bytes_per_s = 0): arrival = s + latency_s.
  LinkModel link;
  /// Data parallelism: replicas D; D = 1 skips the all-reduce.
  int replicas = 1;
  /// [cell]: the gradient buckets in the order they are reduced (from the
  /// cell's last layer backwards). Empty when D = 1.
  std::vector<std::vector<BucketSpec>> buckets;
  /// All-reduce link: a bucket starts when final and the previous bucket is
  /// done (one ring), and takes LinkModel::ring_allreduce_ns (or
  /// ring_allgather_ns when deterministic) of its bytes over D replicas.
  LinkModel allreduce;
  bool deterministic_reduction = false;
  /// [cell]: seconds of the optimizer step after the reduction (may be empty: 0).
  std::vector<double> optimizer_s;
};

struct OpTiming {
  double start = 0, end = 0;
};

/// One cell's simulated step (all times from the step's start, seconds).
struct CellTiming {
  std::vector<OpTiming> ops;  ///< [i]: op i of the cell's list
  double ops_end = 0;         ///< end of the last op
  double reduce_end = 0;      ///< when the last bucket is reduced (ops_end when none)
  double end = 0;             ///< reduce_end + optimizer
  double busy = 0;            ///< sum of op durations + optimizer (the traces' compute time)
  double reduce_exposed = 0;  ///< reduce_end - ops_end (the traces' reduce_wait)
};

struct StepTiming {
  std::vector<CellTiming> cells;
  /// The step time: the latest cell's end. In a run of many steps this is
  /// the period, because the cell that ends last (cell 0 for the three
  /// schedules with balanced cells) starts the next step at once.
  double makespan = 0;
  /// Idle fraction as the traces measure it (perf/schedules_table.py,
  /// GatheredTrace::measured_bubble): the mean over cells of idle / step,
  /// idle = makespan - busy - reduce_exposed (the traces count the reduce
  /// wait as communication, not idle).
  double bubble_fraction = 0;
};

/// Replays `input.schedule` event by event (a grouped W, Op::count > 1,
/// lasts the sum of its micro-batches' backward_weights): each cell (rank) runs its ops in
/// order; an op starts when its cell is free and, for a receiving op (F of
/// stage s > 0, B or I of stage s < stages-1), when the message of the
/// sending op (the same micro-batch's F of stage s-1, B or I of stage s+1)
/// has arrived: multi-stage schedules (V shapes, chunks) replay with their
/// stage map.
/// Then the buckets are reduced and the optimizer runs. Throws
/// std::invalid_argument when sizes disagree with the schedule and
/// std::logic_error when the op lists deadlock (no cell can proceed).
StepTiming simulate_step(const StepInput& input);

}  // namespace gpipe

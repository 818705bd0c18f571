#pragma once
// The performance model behind gpipe-plan: a deck's run on R ranks,
// predicted from the deck alone (the library's own grid, partition, schedule
// and buffer plan; per-layer costs; a network model), by simulating one step
// event by event (predict/simulate.hpp). Pure: no MPI, no Kokkos
// (docs/performance-model.md).

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/link.hpp"
#include "gpipe/predict/costs.hpp"
#include "gpipe/predict/simulate.hpp"
#include "gpipe/train/memory.hpp"

namespace gpipe {

/// The interconnect: neighbouring cells' messages and the replicas' gradient
/// all-reduce (both LinkModel: latency_s, bytes_per_s). Every pair of ranks
/// is assumed to see the same link (no node topology).
struct Network {
  std::string name;     ///< shm | 10GbE | hdr200 | deck | custom
  LinkModel p2p;        ///< pipeline boundary messages (pipeline/link.hpp's Wire)
  LinkModel allreduce;  ///< ring all-reduce (LinkModel::ring_allreduce_ns)
};

/// Named networks (numbers in docs/performance-model.md):
///  - shm: this machine's shared memory (perf/README.md: MPI ping-pong 2 us,
///    6 GB/s for 128 KiB-1 MiB messages; Iallreduce 1.44 GB/s at 2 ranks);
///  - 10GbE: 10 Gb/s Ethernet, 1.25 GB/s, 25 us latency (TCP);
///  - hdr200: 200 Gb/s InfiniBand HDR, 25 GB/s, 1.5 us latency.
/// Throws InputError naming --link for another name.
Network network_preset(const std::string& name);
/// The preset names, for help texts.
const std::vector<std::string>& network_presets();

struct PredictOptions {
  CostSource costs;
  Network network = network_preset("shm");
  /// Rate of the optimizer step in bytes of the arrays it reads and writes
  /// per second: SGD 3 arrays per parameter (5 with momentum), Adam and
  /// AdamW 7. 0: this machine's measured rate for the deck's optimizer
  /// (optimizer_rate).
  double optimizer_bytes_per_s = 0;
  /// Under `pipeline.wait: sleep` (include/gpipe/pipeline/wait.hpp) a
  /// waiting rank polls between sleeps of kWaitSleepMaxUs, so it notices a
  /// point-to-point message on average half a poll period after it arrives:
  /// the model adds this many seconds to every such message's latency
  /// (docs/performance-model.md, "Per-hop delay"). < 0: the default,
  /// kWaitSleepHopS (a quiet machine); gpipe-plan --wait-hop-us sets it (e.g.
  /// from perf/wake_probe.py on a loaded machine). Unused under spin.
  double wait_hop_s = -1;
};

/// The default per-message delay of `pipeline.wait: sleep`, seconds: half a
/// poll period of (kWaitSleepMaxUs + 15 us), 15 us being the overshoot of a
/// short sleep with a timer slack of 1 us on a quiet machine
/// (src/pipeline/transport.cpp).
inline constexpr double kWaitSleepHopS = 32.5e-6;

/// The optimizer step's rate on the development machine, bytes of its
/// arrays per second (perf/gpipe_bench_kernels Optimizer at 1M parameters,
/// float, docs/performance-model.md): SGD 34e9 (memory-bound), Adam and
/// AdamW 5.0e9 (their square root and division per element bound them).
double optimizer_rate(const OptimizerSpec& optimizer);

/// One cell (the same on every replica; replica 0's shard, the largest, is simulated).
struct CellPrediction {
  int first_layer = 0;
  int layers = 0;
  double busy_s = 0;            ///< compute: ops + optimizer
  double idle_s = 0;            ///< step - busy - reduce_exposed
  double reduce_exposed_s = 0;  ///< gradient all-reduce not hidden behind backward
  int peak_micro_batches = 0;   ///< micro-batches in flight: the buffer plan's micro_batch slots
  std::int64_t activation_bytes = 0;  ///< cell_activation_bytes (what Cell allocates and reports)
  std::int64_t parameter_bytes = 0;   ///< parameters x sizeof(T)
  /// Per rank: the device bytes of the memory model (train/memory.hpp,
  /// CellMemory::total(): parameters, gradients, optimizer state,
  /// activations and gradient buffers of the buffer plan, workspaces,
  /// staging, the deterministic reduction's gather buffer), which
  /// tests/mpi/test_memory.cpp checks against the allocations.
  std::int64_t memory_bytes = 0;
  CellMemory memory;  ///< memory_bytes by term
};

struct Prediction {
  int ranks = 0, replicas = 0, cells = 0, micro_batches = 0;
  std::string schedule, remat, network;
  std::int64_t batch_size = 0;      ///< global mini-batch N
  std::int64_t micro_batch_rows = 0;  ///< largest micro-batch
  double step_time_s = 0;
  double samples_per_s = 0;         ///< N / step time
  double bubble_fraction = 0;       ///< simulated, as the traces measure it
  double bubble_analytical = 0;     ///< bubble_fraction(schedule, K, M), balanced cells (-1: a schedule file)
  double imbalance = 0;             ///< max / mean of the cells' busy time
  /// Bytes sent by all ranks in one step: pipeline boundaries (activation
  /// and gradient of every sample at every boundary of every replica) and
  /// the gradient all-reduce (a ring: 2 (D-1) x a cell's gradient bytes per
  /// cell; deterministic: D (D-1) x).
  std::int64_t pipeline_bytes = 0, allreduce_bytes = 0, comm_bytes = 0;
  std::vector<CellPrediction> cells_detail;
  StepTiming timing;
  /// The largest memory_bytes over cells.
  std::int64_t max_memory_bytes() const;
};

/// Predicts one training step of `deck` on `ranks` ranks: grid_shape, the
/// partition (plan_run's; with pipeline.balance time, the min-max split of
/// the predicted layer times, which is what the runner's measurement
/// approximates), the schedule and buffer plan, op times from
/// options.costs at each micro-batch's rows (a BatchWeights op: the
/// whole_batch_weights layers' W at the shard's rows, which the B ops then
/// leave out; a grouped W: those layers' W at the group's stacked rows, the
/// other splitting layers' per micro-batch), and simulate_step. Throws
/// InputError as plan_run does (K not dividing R, more cells than layers,
/// a shard smaller than M).
Prediction predict(const Deck& deck, int ranks, const PredictOptions& options);

/// The StepInput predict() simulates (exposed for tests and tools): the
/// deck's schedule (deck_schedule: pipeline.schedule_file, else the
/// generator of pipeline.schedule), its stages partitioned as the deck's
/// balance mode says (a K-cell explicit list does not fit K x v stages: then
/// by FLOPs).
StepInput step_input(const Deck& deck, int ranks, const PredictOptions& options);

/// As step_input, simulating `schedule` (cells K and micro-batches M of the
/// deck on `ranks` ranks, else InputError) with its stage map: the op times
/// of each of its stages from the partition into schedule.stages stages.
StepInput step_input(const Deck& deck, int ranks, const PredictOptions& options, const Schedule& schedule);

}  // namespace gpipe

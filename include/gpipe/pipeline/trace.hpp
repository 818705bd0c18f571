#pragma once
// Timelines of pipeline steps: what each rank did, when, and how long it
// waited. Written to HDF5 by write_trace() (docs/file-formats.md, "Traces").

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/core/views.hpp"

namespace gpipe {

enum class EventKind : std::int8_t {
  Forward = 0,    ///< a micro-batch's forward through the cell's layers
  Backward = 1,   ///< its backward
  Recompute = 2,  ///< re-materialization of a micro-batch's activations
  Send = 3,       ///< posting an MPI_Isend (including host staging)
  Receive = 4,    ///< posting the step's MPI_Irecvs
  Wait = 5,       ///< blocked on a receive or on send completion: idle
  Optimizer = 6,  ///< zeroing gradients and the optimizer update
  AllReduce = 7,  ///< one gradient bucket's reduction over the replica group, from
                  ///< posting to observed completion; overlaps other events, so it
                  ///< is outside the step's compute/comm/idle accounting
  ReduceWait = 8, ///< blocked on the gradient reductions before the optimizer
                  ///< (data-parallel communication not hidden behind backward)
  BackwardInput = 9,    ///< B of a split backward (zero_bubble): input gradients
  BackwardWeights = 10, ///< W of a split backward (zero_bubble): weight gradients
  Wire = 11,      ///< emulated link (pipeline.link): a message received by this rank
                  ///< from its send to its modelled arrival, or a gradient bucket's
                  ///< modelled ring reduction; overlaps other events, so it is outside
                  ///< the step's accounting
  LinkWait = 12, ///< emulated link: blocked until a message's modelled arrival (the
                  ///< part of the wire time not hidden behind compute): idle
};

/// One timed operation. Times are seconds since the run's common origin.
struct TraceEvent {
  std::int64_t step;
  std::int8_t kind;          ///< EventKind
  std::int32_t micro_batch;  ///< -1 when the event has none
  double start;
  double end;
  std::int64_t bytes;        ///< bytes sent or received (0 for compute)
};

/// Per-rank totals of one recorded step. compute = forward + backward
/// (fused, or its B and W parts) + recompute + optimizer; comm = send + receive + reduce_wait; idle = wait +
/// link_wait;
/// other = time between operations (staging, bookkeeping, preemption by the
/// OS). All-reduce events overlap the others and are outside this accounting.
/// Exact by construction: every interval between two consecutive clock reads
/// of the step is attributed to exactly one category, in integer
/// nanoseconds, so compute_ns + comm_ns + idle_ns + other_ns == step_ns
/// always, whatever the load. The *_time fields are the same in seconds.
struct StepSummary {
  std::int64_t step;
  double start;
  double end;
  double step_time;
  double compute_time;
  double comm_time;
  double idle_time;
  double idle_fraction;  ///< idle_ns / step_ns
  std::int64_t peak_activation_bytes;
  double other_time;
  std::int64_t step_ns;
  std::int64_t compute_ns;
  std::int64_t comm_ns;
  std::int64_t idle_ns;
  std::int64_t other_ns;
};

/// Records events of sampled steps on one rank. Times are read from `clock`
/// (integer nanoseconds of a monotonic clock; steady_clock by default) minus
/// `origin_ns` (take the origin right after a barrier so ranks agree).
class Tracer {
 public:
  using Clock = std::int64_t (*)();
  /// Nanoseconds of std::chrono::steady_clock.
  static std::int64_t steady_ns();

  Tracer() : Tracer(steady_ns()) {}
  explicit Tracer(std::int64_t origin_ns, Clock clock = &steady_ns)
      : clock_(clock), origin_(origin_ns) {}

  /// Whether step `step` should be recorded when every `every`-th step is:
  /// step % every == 0, and also the step right after the first recorded one
  /// while that is the only one (the first step of a run is a warm-up, so it
  /// is never the only traced step).
  bool wants(std::int64_t step, std::int64_t every) const;
  /// Starts step `step`; events are recorded only if `record`.
  void begin_step(std::int64_t step, bool record);
  /// Appends an event timed by the caller (an operation that overlaps the
  /// scoped ones, such as an all-reduce), if recording. Times from now().
  void record(EventKind kind, int micro_batch, double start, double end, std::int64_t bytes);
  /// The same with times in the clock's nanoseconds (as Tracer::steady_ns() and
  /// link_clock_ns() return them).
  void record_ns(EventKind kind, int micro_batch, std::int64_t start_ns, std::int64_t end_ns,
                 std::int64_t bytes) {
    record(kind, micro_batch, seconds(start_ns), seconds(end_ns), bytes);
  }
  /// Ends the step and appends its StepSummary (if recorded).
  void end_step(std::int64_t peak_activation_bytes);
  bool recording() const { return recording_; }
  /// The execution-space instance fenced at the end of each timed operation
  /// and step (the cell's; the default instance unless set): only its work
  /// is waited for, never the host program's other instances.
  void set_execution_space(const ExecSpace& space) { space_ = space; }
  /// Seconds since the origin.
  double now() const;

  /// One operation: always a Kokkos profiling region ("gpipe::forward",
  /// "gpipe::backward", ... see region_name), so Kokkos Tools show the
  /// pipeline's structure; and, while recording, a timed event (the
  /// tracer's execution-space instance is fenced at the end so asynchronous
  /// kernels count).
  class Scope {
   public:
    Scope(Tracer* tracer, EventKind kind, int micro_batch, std::int64_t bytes = 0);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Tracer* tracer_;
    TraceEvent event_;
  };

  const std::vector<TraceEvent>& events() const { return events_; }
  const std::vector<StepSummary>& steps() const { return steps_; }

 private:
  // Reads the clock and attributes the interval since the previous read to
  // the innermost open operation, or to "other" when none is open.
  std::int64_t read();
  double seconds(std::int64_t ns) const { return double(ns - origin_) * 1e-9; }

  static constexpr int kOther = int(EventKind::LinkWait) + 1;  // index after the last EventKind
  Clock clock_;
  std::int64_t origin_;
  ExecSpace space_{};
  bool recording_ = false;
  std::int64_t step_ = 0;
  std::int64_t step_start_ = 0;
  std::int64_t last_read_ = 0;
  std::int64_t spent_[kOther + 1] = {};  // ns per EventKind, and other
  std::vector<EventKind> open_;          // operations open now, innermost last
  std::size_t first_event_ = 0;
  std::vector<TraceEvent> events_;
  std::vector<StepSummary> steps_;
};

/// Kokkos profiling region of an event kind: "gpipe::forward", "gpipe::backward",
/// "gpipe::recompute", "gpipe::send", "gpipe::receive", "gpipe::wait", "gpipe::optimizer",
/// "gpipe::allreduce", "gpipe::reduce_wait", "gpipe::wire", "gpipe::link_wait".
const char* region_name(EventKind kind);

/// Mean idle_fraction over `steps` (0 if empty).
double mean_idle_fraction(const std::vector<StepSummary>& steps);

}  // namespace gpipe

#include "gpipe/pipeline/trace.hpp"

#include <mpi.h>

#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

double Tracer::now() const { return MPI_Wtime() - origin_; }

bool Tracer::wants(std::int64_t step, std::int64_t every) const {
  if (every > 0 && step % every == 0) return true;
  return steps_.size() == 1 && steps_.front().step == step - 1;
}

void Tracer::begin_step(std::int64_t step, bool record) {
  recording_ = record;
  step_ = step;
  if (!record) return;
  compat::fence("gpipe::Tracer::begin_step");
  step_start_ = now();
  first_event_ = events_.size();
}

void Tracer::end_step(std::int64_t peak_activation_bytes) {
  if (!recording_) return;
  compat::fence("gpipe::Tracer::end_step");
  StepSummary s{step_, step_start_, now(), 0, 0, 0, 0, 0, peak_activation_bytes};
  s.step_time = s.end - s.start;
  for (std::size_t i = first_event_; i < events_.size(); ++i) {
    const auto& e = events_[i];
    const double d = e.end - e.start;
    switch (EventKind(e.kind)) {
      case EventKind::Send:
      case EventKind::Receive:
      case EventKind::ReduceWait: s.comm_time += d; break;
      case EventKind::AllReduce: break;  // overlaps the events above
      case EventKind::Wait: s.idle_time += d; break;
      default: s.compute_time += d; break;
    }
  }
  s.idle_fraction = s.step_time > 0 ? s.idle_time / s.step_time : 0;
  steps_.push_back(s);
  recording_ = false;
}

void Tracer::record(EventKind kind, int micro_batch, double start, double end, std::int64_t bytes) {
  if (recording_) events_.push_back({step_, std::int8_t(kind), micro_batch, start, end, bytes});
}

const char* region_name(EventKind kind) {
  static const char* names[] = {"gpipe::forward", "gpipe::backward", "gpipe::recompute", "gpipe::send",
                                "gpipe::receive", "gpipe::wait",     "gpipe::optimizer",
                                "gpipe::allreduce", "gpipe::reduce_wait"};
  return names[int(kind)];
}

Tracer::Scope::Scope(Tracer* tracer, EventKind kind, int micro_batch, std::int64_t bytes)
    : tracer_(tracer && tracer->recording() ? tracer : nullptr) {
  Kokkos::Profiling::pushRegion(region_name(kind));
  if (!tracer_) return;
  event_ = {tracer_->step_, std::int8_t(kind), micro_batch, tracer_->now(), 0, bytes};
}

Tracer::Scope::~Scope() {
  if (tracer_) {
    compat::fence("gpipe::Tracer::Scope");
    event_.end = tracer_->now();
    tracer_->events_.push_back(event_);
  }
  Kokkos::Profiling::popRegion();
}

double mean_idle_fraction(const std::vector<StepSummary>& steps) {
  if (steps.empty()) return 0;
  double sum = 0;
  for (const auto& s : steps) sum += s.idle_fraction;
  return sum / double(steps.size());
}

}  // namespace gpipe

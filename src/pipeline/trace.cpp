#include "gpipe/pipeline/trace.hpp"

#include <chrono>

#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

std::int64_t Tracer::steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Tracer::now() const { return seconds(clock_()); }

std::int64_t Tracer::read() {
  const std::int64_t t = clock_();
  spent_[open_.empty() ? kOther : int(open_.back())] += t - last_read_;
  last_read_ = t;
  return t;
}

bool Tracer::wants(std::int64_t step, std::int64_t every) const {
  if (every > 0 && step % every == 0) return true;
  return steps_.size() == 1 && steps_.front().step == step - 1;
}

void Tracer::begin_step(std::int64_t step, bool record) {
  recording_ = record;
  step_ = step;
  if (!record) return;
  compat::fence(space_, "gpipe::Tracer::begin_step");
  open_.clear();
  step_start_ = last_read_ = clock_();
  for (auto& s : spent_) s = 0;
  first_event_ = events_.size();
}

void Tracer::end_step(std::int64_t peak_activation_bytes) {
  if (!recording_) return;
  compat::fence(space_, "gpipe::Tracer::end_step");
  const std::int64_t end = read();
  StepSummary s{};
  s.step = step_;
  s.start = seconds(step_start_);
  s.end = seconds(end);
  s.peak_activation_bytes = peak_activation_bytes;
  using K = EventKind;
  const auto ns = [&](K k) { return spent_[int(k)]; };
  s.step_ns = end - step_start_;
  s.compute_ns = ns(K::Forward) + ns(K::Backward) + ns(K::BackwardInput) + ns(K::BackwardWeights) +
                 ns(K::Recompute) + ns(K::Optimizer);
  s.comm_ns = ns(K::Send) + ns(K::Receive) + ns(K::ReduceWait);
  s.idle_ns = ns(K::Wait) + ns(K::LinkWait);
  s.other_ns = spent_[kOther];
  s.step_time = double(s.step_ns) * 1e-9;
  s.compute_time = double(s.compute_ns) * 1e-9;
  s.comm_time = double(s.comm_ns) * 1e-9;
  s.idle_time = double(s.idle_ns) * 1e-9;
  s.other_time = double(s.other_ns) * 1e-9;
  s.idle_fraction = s.step_ns > 0 ? double(s.idle_ns) / double(s.step_ns) : 0;
  steps_.push_back(s);
  recording_ = false;
}

void Tracer::record(EventKind kind, int micro_batch, double start, double end, std::int64_t bytes) {
  if (recording_) events_.push_back({step_, std::int8_t(kind), micro_batch, start, end, bytes});
}

const char* region_name(EventKind kind) {
  // A switch, not a table: a new EventKind without a name is a compiler warning
  // (-Wswitch), not an out-of-bounds read.
  switch (kind) {
    case EventKind::Forward: return "gpipe::forward";
    case EventKind::Backward: return "gpipe::backward";
    case EventKind::Recompute: return "gpipe::recompute";
    case EventKind::Send: return "gpipe::send";
    case EventKind::Receive: return "gpipe::receive";
    case EventKind::Wait: return "gpipe::wait";
    case EventKind::Optimizer: return "gpipe::optimizer";
    case EventKind::AllReduce: return "gpipe::allreduce";
    case EventKind::ReduceWait: return "gpipe::reduce_wait";
    case EventKind::BackwardInput: return "gpipe::backward_input";
    case EventKind::BackwardWeights: return "gpipe::backward_weights";
    case EventKind::Wire: return "gpipe::wire";
    case EventKind::LinkWait: return "gpipe::link_wait";
  }
  return "gpipe::event";
}

Tracer::Scope::Scope(Tracer* tracer, EventKind kind, int micro_batch, std::int64_t bytes)
    : tracer_(tracer && tracer->recording() ? tracer : nullptr) {
  Kokkos::Profiling::pushRegion(region_name(kind));
  if (!tracer_) return;
  const std::int64_t start = tracer_->read();
  tracer_->open_.push_back(kind);
  event_ = {tracer_->step_, std::int8_t(kind), micro_batch, tracer_->seconds(start), 0, bytes};
}

Tracer::Scope::~Scope() {
  if (tracer_) {
    compat::fence(tracer_->space_, "gpipe::Tracer::Scope");
    const std::int64_t end = tracer_->read();
    tracer_->open_.pop_back();
    event_.end = tracer_->seconds(end);
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

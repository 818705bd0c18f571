#include "gpipe/pipeline/link.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace gpipe {

LinkModel LinkModel::from_deck(double latency_us, double bandwidth_gbps) {
  LinkModel m;
  m.latency_s = latency_us * 1e-6;
  m.bytes_per_s = bandwidth_gbps * 1e9 / 8;
  return m;
}

std::int64_t LinkModel::transmit_ns(std::int64_t bytes) const {
  if (!enabled() || bytes <= 0) return 0;
  return std::int64_t(std::ceil(double(bytes) / bytes_per_s * 1e9));
}

std::int64_t LinkModel::latency_ns() const { return std::int64_t(std::ceil(latency_s * 1e9)); }

std::int64_t LinkModel::ring_allreduce_ns(std::int64_t bytes, int replicas) const {
  if (!enabled() || replicas <= 1) return 0;
  const int steps = 2 * (replicas - 1);
  return std::int64_t(std::ceil(double(steps) / replicas * double(bytes) / bytes_per_s * 1e9)) +
         steps * latency_ns();
}

std::int64_t LinkModel::ring_allgather_ns(std::int64_t bytes, int replicas) const {
  if (!enabled() || replicas <= 1) return 0;
  return (replicas - 1) * (transmit_ns(bytes) + latency_ns());
}

std::int64_t Wire::transmit(std::int64_t sent_ns, std::int64_t bytes) {
  const std::int64_t start = std::max(sent_ns, free_ns_);
  free_ns_ = start + model_.transmit_ns(bytes);
  return free_ns_ + model_.latency_ns();
}

std::int64_t link_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void hold_until(std::int64_t until_ns) {
  constexpr std::int64_t kSpin = 200000;  // ns
  for (std::int64_t now = link_clock_ns(); now < until_ns; now = link_clock_ns()) {
    if (until_ns - now > kSpin)
      std::this_thread::sleep_for(std::chrono::nanoseconds(until_ns - now - kSpin));
    else
      std::this_thread::yield();
  }
}

}  // namespace gpipe

#pragma once
// An emulated slow link between ranks: a test and planning facility that
// delays message delivery as a network of a given latency and bandwidth
// would (deck pipeline.link; docs/design.md, "Emulated link").

#include <cstdint>

namespace gpipe {

/// The link's parameters. Off (enabled() false) by default.
struct LinkModel {
  double latency_s = 0;       ///< one-way latency per message, seconds (>= 0)
  double bytes_per_s = 0;     ///< bandwidth, bytes/second (0: no emulated link)

  /// From the deck's units: latency in microseconds, bandwidth in Gb/s (1 Gb/s = 1.25e8 bytes/s).
  static LinkModel from_deck(double latency_us, double bandwidth_gbps);
  bool enabled() const { return bytes_per_s > 0; }
  /// Nanoseconds `bytes` occupy the wire: ceil(bytes / bytes_per_s x 1e9).
  std::int64_t transmit_ns(std::int64_t bytes) const;
  /// The latency in nanoseconds, rounded up.
  std::int64_t latency_ns() const;
  /// A ring all-reduce of `bytes` per replica over `replicas` ranks:
  /// reduce-scatter then all-gather, 2 (D-1) steps of bytes/D each, so
  /// 2 (D-1)/D x bytes / bandwidth + 2 (D-1) x latency (0 for D = 1).
  /// (Patarasuk and Yuan, J. Parallel Distrib. Comput. 69 (2009) 117.)
  std::int64_t ring_allreduce_ns(std::int64_t bytes, int replicas) const;
  /// A ring all-gather of `bytes` per replica: D-1 steps of `bytes` each,
  /// (D-1) x (bytes / bandwidth + latency) (0 for D = 1).
  std::int64_t ring_allgather_ns(std::int64_t bytes, int replicas) const;
};

/// One direction of a link: messages occupy it one after another, as on a
/// real wire. Lives on the sending rank (which sees every message of its
/// direction in order).
class Wire {
 public:
  explicit Wire(LinkModel model = {}) : model_(model) {}
  const LinkModel& model() const { return model_; }
  /// A message of `bytes` handed to the wire at `sent_ns`: it starts when
  /// the wire is free (max(sent_ns, end of the previous message)), occupies
  /// it transmit_ns(bytes), and arrives latency_ns() after its last byte
  /// left. Returns the arrival time (same clock as sent_ns).
  std::int64_t transmit(std::int64_t sent_ns, std::int64_t bytes);

 private:
  LinkModel model_;
  std::int64_t free_ns_ = 0;  // when the last message's last byte leaves
};

/// The clock of the emulation: std::chrono::steady_clock in nanoseconds
/// (Linux: CLOCK_MONOTONIC, one clock for every process of a node, so a
/// time stamped by the sender is comparable at the receiver on the same
/// node; across nodes it is not, see docs/design.md).
std::int64_t link_clock_ns();

/// Returns once link_clock_ns() >= until_ns: sleeps while more than 200 us
/// remain, then yields in a loop (a sleep alone overshoots by the timer
/// slack, tens of microseconds).
void hold_until(std::int64_t until_ns);

}  // namespace gpipe

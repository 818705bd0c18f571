// The emulated link (pipeline.link): the model's arithmetic in exact
// nanoseconds, serialization on one wire, the deck keys, and the trace's
// wire/link_wait accounting. No test here reads a real clock.

#include <gtest/gtest.h>

#include "../common/deck_error.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/pipeline/link.hpp"
#include "gpipe/pipeline/trace.hpp"

namespace gpipe {
namespace {

TEST(LinkModel, DeckUnits) {
  const LinkModel m = LinkModel::from_deck(20, 1);  // 20 us, 1 Gb/s = 1.25e8 bytes/s
  EXPECT_TRUE(m.enabled());
  EXPECT_EQ(m.latency_ns(), 20000);
  EXPECT_EQ(m.transmit_ns(1250), 10000);  // 1250 B / 1.25e8 B/s = 10 us
  EXPECT_EQ(m.transmit_ns(1), 8);
  EXPECT_EQ(m.transmit_ns(0), 0);
  EXPECT_FALSE(LinkModel{}.enabled());
  EXPECT_EQ(LinkModel{}.transmit_ns(1 << 20), 0);
}

TEST(LinkModel, Ring) {
  const LinkModel m = LinkModel::from_deck(20, 1);
  // 2 (D-1)/D x 5000 B / 1.25e8 B/s = 1.5 x 40 us = 60 us, plus 2 (D-1) = 6 latencies
  EXPECT_EQ(m.ring_allreduce_ns(5000, 4), 60000 + 6 * 20000);
  EXPECT_EQ(m.ring_allreduce_ns(5000, 2), 40000 + 2 * 20000);
  EXPECT_EQ(m.ring_allreduce_ns(5000, 1), 0);
  // all-gather: D-1 steps of the whole bucket
  EXPECT_EQ(m.ring_allgather_ns(1250, 4), 3 * (10000 + 20000));
  EXPECT_EQ(m.ring_allgather_ns(1250, 1), 0);
}

TEST(LinkModel, WireSerializesMessages) {
  Wire w(LinkModel::from_deck(20, 1));
  EXPECT_EQ(w.transmit(0, 1250), 10000 + 20000);       // wire [0, 10 us), then the latency
  EXPECT_EQ(w.transmit(0, 1250), 20000 + 20000);       // waits for the first one's last byte
  EXPECT_EQ(w.transmit(5000, 2500), 40000 + 20000);    // starts at 20 us, 20 us on the wire
  EXPECT_EQ(w.transmit(100000, 1250), 110000 + 20000); // an idle wire: starts when sent
}

const char* kDeck =
    "model: {input: 4, layers: [{type: dense, units: 3}]}\n"
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
    "training: {epochs: 1, batch_size: 4}\n";

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  return test::deck_text_error(text, sets);
}

TEST(LinkDeck, OffByDefault) {
  const Deck d = parse_deck(kDeck, "deck.yaml");
  EXPECT_FALSE(d.pipeline.link.enabled());
}

TEST(LinkDeck, KeysAndSet) {
  const Deck d = parse_deck(std::string(kDeck) + "pipeline: {link: {latency_us: 20, bandwidth_gbps: 0.5}}\n",
                            "deck.yaml");
  EXPECT_TRUE(d.pipeline.link.enabled());
  EXPECT_EQ(d.pipeline.link.latency_us, 20);
  EXPECT_EQ(d.pipeline.link.bandwidth_gbps, 0.5);
  const Deck s = parse_deck(std::string(kDeck) + "pipeline: {remat: always}\n", "deck.yaml",
                            {"pipeline.link.latency_us=200", "pipeline.link.bandwidth_gbps=10"});
  EXPECT_EQ(s.pipeline.link.latency_us, 200);
  EXPECT_EQ(s.pipeline.link.bandwidth_gbps, 10);
  EXPECT_EQ(s.pipeline.remat, Remat::Always);  // the section's other keys stay
  const Deck n = parse_deck(kDeck, "deck.yaml", {"pipeline.link.bandwidth_gbps=1"});  // no pipeline section
  EXPECT_EQ(n.pipeline.link.bandwidth_gbps, 1);
  EXPECT_EQ(n.pipeline.link.latency_us, 0);
}

TEST(LinkDeck, Errors) {
  EXPECT_EQ(error_of(kDeck, {"pipeline.link.bandwidth_gbps=0"}),
            "deck.yaml (--set): pipeline.link.bandwidth_gbps: expected a finite number > 0, got 0");
  EXPECT_EQ(error_of(kDeck, {"pipeline.link.bandwidth_gbps=1", "pipeline.link.latency_us=-1"}),
            "deck.yaml (--set): pipeline.link.latency_us: expected a finite number >= 0, got -1");
  EXPECT_EQ(error_of(std::string(kDeck) + "pipeline: {link: {latency_us: 2}}\n"),
            "deck.yaml:4:18: missing required field 'pipeline.link.bandwidth_gbps' (a finite number > 0)");
  EXPECT_EQ(error_of(std::string(kDeck) + "pipeline: {link: {bandwidth_gbps: 1, jitter: 3}}\n"),
            "deck.yaml:4:38: unknown key 'jitter' in pipeline.link (expected one of: latency_us, "
            "bandwidth_gbps)");
  EXPECT_EQ(error_of(std::string(kDeck) + "pipeline: {link: 10}\n"),
            "deck.yaml:4:18: pipeline.link: expected a map of settings (latency_us, bandwidth_gbps)");
}

std::vector<std::int64_t> script;
std::size_t reads = 0;
std::int64_t scripted() { return script.at(reads++); }

// A link wait is idle time; the wire event (recorded, not scoped) reads no clock.
TEST(LinkTrace, LinkWaitIsIdle) {
  script = {0, 10, 50, 60, 100, 120};  // begin; wait [10, 50); link_wait [60, 100); end
  reads = 0;
  Tracer t(0, &scripted);
  t.begin_step(0, true);
  { const Tracer::Scope w(&t, EventKind::Wait, 1); }
  t.record_ns(EventKind::Wire, 1, 30, 100, 64);
  { const Tracer::Scope h(&t, EventKind::LinkWait, 1); }
  t.end_step(0);
  EXPECT_EQ(reads, script.size());
  const StepSummary& s = t.steps().at(0);
  EXPECT_EQ(s.idle_ns, 40 + 40);
  EXPECT_EQ(s.compute_ns + s.comm_ns + s.idle_ns + s.other_ns, s.step_ns);
  ASSERT_EQ(t.events().size(), 3u);
  EXPECT_EQ(t.events()[1].kind, std::int8_t(EventKind::Wire));
  EXPECT_DOUBLE_EQ(t.events()[1].start, 30e-9);
  EXPECT_DOUBLE_EQ(t.events()[1].end, 100e-9);
}

// Overlap: 1 - link_wait / (union of the wire intervals), warm-up step left out.
TEST(LinkTrace, OverlapFraction) {
  GatheredTrace g;
  const auto step = [](std::int64_t s) {
    StepSummary x{};
    x.step = s;
    return x;
  };
  const auto ev = [](std::int64_t s, EventKind k, double a, double b) {
    return TraceEvent{s, std::int8_t(k), 0, a, b, 8};
  };
  g.steps = {{step(0), step(1)}, {step(0), step(1)}};
  g.events = {{ev(0, EventKind::Wire, 0, 100), ev(0, EventKind::LinkWait, 0, 100),  // warm-up: ignored
               ev(1, EventKind::Wire, 0, 2), ev(1, EventKind::Wire, 1, 4),           // union [0, 4)
               ev(1, EventKind::Wire, 6, 8), ev(1, EventKind::LinkWait, 3, 4)},
              {ev(1, EventKind::Wire, 0, 2), ev(1, EventKind::LinkWait, 1, 2)}};
  const auto c = g.communication();
  EXPECT_DOUBLE_EQ(c.link_wire_seconds, (6.0 + 2.0) / 2);  // per rank and step
  EXPECT_DOUBLE_EQ(c.link_wait_seconds, (1.0 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(c.link_overlap_fraction, 1.0 - 2.0 / 8.0);
  EXPECT_EQ(GatheredTrace{}.communication().link_overlap_fraction, 0.0);
}

}  // namespace
}  // namespace gpipe

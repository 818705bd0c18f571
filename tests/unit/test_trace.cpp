// Trace accounting is exact by construction: with a scripted clock (no real
// timing), every interval between consecutive clock reads lands in exactly one
// category, and the categories add up to the step, bit for bit.

#include <gtest/gtest.h>

#include <vector>

#include "gpipe/core/rng.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/pipeline/trace.hpp"

namespace gpipe {
namespace {

std::vector<std::int64_t> script;  // clock values, consumed in order
std::size_t reads = 0;
std::int64_t scripted() { return script.at(reads++); }

TEST(TraceAccounting, EveryIntervalInExactlyOneCategory) {
  script = {100,                 // begin_step
            130, 200, 260, 300,  // forward [130, 300) with a nested send [200, 260)
            1000, 1100,          // 700 ns preempted, then a wait of 100
            1105, 1205,          // optimizer
            1210};               // end_step
  reads = 0;
  Tracer t(40, &scripted);
  t.begin_step(3, true);
  {
    const Tracer::Scope f(&t, EventKind::Forward, 0);
    const Tracer::Scope s(&t, EventKind::Send, 0, 64);
  }
  { const Tracer::Scope w(&t, EventKind::Wait, 0); }
  { const Tracer::Scope o(&t, EventKind::Optimizer, -1); }
  t.end_step(1234);
  EXPECT_EQ(reads, script.size());
  ASSERT_EQ(t.steps().size(), 1u);
  const StepSummary& s = t.steps()[0];
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.step_ns, 1110);
  EXPECT_EQ(s.compute_ns, 70 + 40 + 100);  // forward outside the send, optimizer
  EXPECT_EQ(s.comm_ns, 60);
  EXPECT_EQ(s.idle_ns, 100);
  EXPECT_EQ(s.other_ns, 30 + 700 + 5 + 5);
  EXPECT_EQ(s.compute_ns + s.comm_ns + s.idle_ns + s.other_ns, s.step_ns);
  EXPECT_EQ(s.peak_activation_bytes, 1234);
  EXPECT_DOUBLE_EQ(s.idle_fraction, 100.0 / 1110.0);
  EXPECT_DOUBLE_EQ(s.start, 60e-9);
  ASSERT_EQ(t.events().size(), 4u);
  EXPECT_EQ(t.events()[0].kind, std::int8_t(EventKind::Send));  // closed first
  EXPECT_DOUBLE_EQ(t.events()[1].start, 90e-9);
  EXPECT_DOUBLE_EQ(t.events()[1].end, 260e-9);
}

TEST(TraceAccounting, UnrecordedStepsReadNoClock) {
  script = {};
  reads = 0;
  Tracer t(0, &scripted);
  t.begin_step(0, false);
  { const Tracer::Scope f(&t, EventKind::Forward, 0); }
  t.end_step(0);
  EXPECT_EQ(reads, 0u);
  EXPECT_TRUE(t.steps().empty());
}

// Arbitrary gaps (up to hours, as a descheduled rank might see) never break the sum.
TEST(TraceAccounting, ExactForAnyGaps) {
  script.clear();
  std::int64_t now = 5;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    now += std::int64_t(rng::hash(11, 0, i) % 4'000'000'000'000ULL);
    script.push_back(now);
  }
  reads = 0;
  Tracer t(0, &scripted);
  for (int step = 0; step < 10; ++step) {
    t.begin_step(step, true);
    for (int m = 0; m < 20; ++m) {
      const Tracer::Scope f(&t, EventKind(m % 7), m);
      if (m % 3 == 0) {
        const Tracer::Scope inner(&t, EventKind((m + 1) % 7), m);
      }
    }
    t.end_step(0);
  }
  ASSERT_EQ(t.steps().size(), 10u);
  for (const auto& s : t.steps())
    EXPECT_EQ(s.compute_ns + s.comm_ns + s.idle_ns + s.other_ns, s.step_ns) << s.step;
}

// The communication split and the all-reduce overlap from known events: per
// rank and recorded step, overlap = 1 - reduce_wait / (first all-reduce
// posted .. last completed), clamped to [0, 1], then averaged.
TEST(TraceCommunication, OverlapFromKnownEvents) {
  auto event = [](std::int64_t step, EventKind kind, double start, double end) {
    return TraceEvent{step, std::int8_t(kind), -1, start, end, 0};
  };
  auto step = [](std::int64_t n) {
    StepSummary s{};
    s.step = n;
    return s;
  };
  GatheredTrace t;
  t.steps = {{step(5)}, {step(5)}};
  t.events = {
      // rank 0: two buckets over [1.0, 2.0], 0.2 s of it waited for: 80 % hidden
      {event(5, EventKind::Send, 0.0, 0.1), event(5, EventKind::Receive, 0.2, 0.25),
       event(5, EventKind::AllReduce, 1.0, 1.6), event(5, EventKind::AllReduce, 1.2, 2.0),
       event(5, EventKind::ReduceWait, 1.8, 2.0),
       event(7, EventKind::ReduceWait, 5.0, 9.0)},  // a step not recorded: ignored
      // rank 1: waited longer than the reduction lasted (staging, the sum kernel): 0, not negative
      {event(5, EventKind::AllReduce, 3.0, 3.4), event(5, EventKind::ReduceWait, 2.9, 3.5)}};
  const auto c = t.communication();
  EXPECT_NEAR(c.pipeline_seconds, (0.1 + 0.05) / 2, 1e-12);
  EXPECT_NEAR(c.data_parallel_seconds, (0.2 + 0.6) / 2, 1e-12);
  EXPECT_NEAR(c.allreduce_seconds, (1.0 + 0.4) / 2, 1e-12);
  EXPECT_NEAR(c.overlap_fraction, (0.8 + 0.0) / 2, 1e-12);
  EXPECT_GE(c.overlap_fraction, 0.0);
  EXPECT_LE(c.overlap_fraction, 1.0);

  // Without data parallelism (no all-reduce events): nothing to hide, overlap 0.
  GatheredTrace p;
  p.steps = {{step(0)}};
  p.events = {{event(0, EventKind::Send, 0.0, 0.5)}};
  const auto q = p.communication();
  EXPECT_DOUBLE_EQ(q.pipeline_seconds, 0.5);
  EXPECT_EQ(q.allreduce_seconds, 0.0);
  EXPECT_EQ(q.overlap_fraction, 0.0);
}

}  // namespace
}  // namespace gpipe

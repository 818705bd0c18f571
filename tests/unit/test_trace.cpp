// Trace accounting is exact by construction: with a scripted clock (no real
// timing), every interval between consecutive clock reads lands in exactly one
// category, and the categories add up to the step, bit for bit.

#include <gtest/gtest.h>

#include <vector>

#include "gpipe/core/rng.hpp"
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

}  // namespace
}  // namespace gpipe

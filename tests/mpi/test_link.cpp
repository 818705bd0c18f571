// The emulated link (pipeline.link) at 2 or more ranks: a 2-rank exchange is
// delivered no earlier than the model says, in order and with its bytes;
// training is bitwise the same with and without the link (pipeline and
// data-parallel all-reduce); the trace's wire events follow the model. No
// assertion depends on how fast the machine is: the model gives lower
// bounds, and lower bounds are all that is checked.

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/pipeline/link.hpp"
#include "gpipe/pipeline/transport.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

MPI_Comm first_ranks(int size) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < size ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  return comm;
}

// Rank 0 sends 4 messages of different sizes on one tag, back to back;
// rank 1 has all 4 receives posted before. Each is delivered (hold_until
// its stamped arrival) no earlier than its own send + latency + bytes /
// bandwidth, nor before the wire has carried every earlier message.
TEST(EmulatedLink, TwoRankExchangeDeliveredNoEarlierThanTheModel) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm comm = first_ranks(2);
  if (comm == MPI_COMM_NULL) return;
  const LinkModel model = LinkModel::from_deck(1000, 0.01);  // 1 ms, 1.25e6 bytes/s
  constexpr std::int64_t kCols = 50;
  const std::vector<std::int64_t> rows = {4, 1, 8, 2};   // 1600, 400, 3200, 800 bytes
  constexpr int kTag = 7;
  std::vector<BoundaryBuffer<double>> buffers;
  for (size_t i = 0; i < rows.size(); ++i) buffers.emplace_back("link_test", 8, kCols);
  std::vector<std::int64_t> sent(rows.size()), delivered(rows.size());
  const int rank = world_rank();
  if (rank == 1)
    for (size_t i = 0; i < rows.size(); ++i)
      buffers[i].post_recv(comm, 0, kTag, rows[i], "test message", int(i), true);
  MPI_Barrier(comm);
  if (rank == 0) {
    Wire wire(model);
    for (size_t i = 0; i < rows.size(); ++i) {
      Kokkos::deep_copy(buffers[i].rows(rows[i]), double(i + 1));
      sent[i] = link_clock_ns();
      buffers[i].post_send(comm, 1, kTag, rows[i], &wire);
    }
    for (auto& b : buffers) b.wait();
    MPI_Send(sent.data(), int(sent.size()), MPI_INT64_T, 1, 99, comm);
  } else {
    std::int64_t previous_arrival = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      buffers[i].wait();
      const WireTime w = buffers[i].wire_time();
      EXPECT_EQ(w.bytes, rows[i] * kCols * 8) << "message " << i;
      EXPECT_GT(w.arrival_ns, previous_arrival) << "message " << i;  // in order on the wire
      previous_arrival = w.arrival_ns;
      hold_until(w.arrival_ns);
      delivered[i] = link_clock_ns();
      const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), buffers[i].rows(rows[i]));
      for (std::int64_t r = 0; r < rows[i]; ++r)
        for (std::int64_t c = 0; c < kCols; ++c) ASSERT_EQ(host(r, c), double(i + 1)) << "message " << i;
    }
    MPI_Recv(sent.data(), int(sent.size()), MPI_INT64_T, 0, 99, comm, MPI_STATUS_IGNORE);
    std::int64_t carried = 0;  // wire time of messages 0..i
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::int64_t tx = model.transmit_ns(rows[i] * kCols * 8);
      carried += tx;
      EXPECT_EQ(tx, rows[i] * kCols * 8 * 800);  // 800 ns per byte at 0.01 Gb/s
      EXPECT_GE(delivered[i], sent[i] + model.latency_ns() + tx) << "message " << i;
      EXPECT_GE(delivered[i], sent[0] + model.latency_ns() + carried) << "message " << i;
    }
  }
  MPI_Comm_free(&comm);
}

struct LinkRun {
  std::vector<double> params;
  std::vector<double> losses;
  std::vector<TraceEvent> events;
};

LinkRun train(int ranks, int cells, const std::vector<std::string>& link, const std::string& schedule,
          int steps = 3, std::int64_t batch = 12) {
  LinkRun r;
  MPI_Comm comm = first_ranks(ranks);
  if (comm == MPI_COMM_NULL) return r;
  std::vector<std::string> sets = link;
  sets.push_back("parallel.cells=" + std::to_string(cells));
  sets.push_back("parallel.deterministic_reduction=true");
  sets.push_back("trace.file=unused.h5");  // records events in memory; nothing is written here
  sets.push_back("trace.every=1");
  sets.push_back("parallel.bucket_kib=1");  // several buckets
  const Deck deck = parse_deck(test::deck_text(test::kNineLayers, test::kNineLayersInput, batch, 4, "double",
                                               "{schedule: " + schedule + "}"),
                               "link-deck", sets);
  const Dataset data = test::synthetic(batch * 2, test::kNineLayersInput, 3, 5);
  {
    Pipeline<double> p(deck, comm);
    for (int s = 0; s < steps; ++s) {
      const auto order = epoch_order(data.samples, deck.seed, s, true);
      r.losses.push_back(p.from_last(p.step(data, order, (s % 2) * batch, batch).loss));
    }
    const auto params = p.gather_parameters();
    r.params.assign(params.begin(), params.end());
    r.events = p.tracer().events();
  }
  MPI_Comm_free(&comm);
  return r;
}

const std::vector<std::string> kSlowLink = {"pipeline.link.latency_us=300",
                                            "pipeline.link.bandwidth_gbps=0.05"};

TEST(EmulatedLink, TrainingBitwiseUnchanged) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (const char* schedule : {"fill_drain", "1f1b"}) {
    const LinkRun plain = train(2, 2, {}, schedule);
    const LinkRun linked = train(2, 2, kSlowLink, schedule);
    if (world_rank() != 0) continue;
    ASSERT_FALSE(plain.params.empty());
    EXPECT_EQ(plain.params, linked.params) << schedule;
    EXPECT_EQ(plain.losses, linked.losses) << schedule;
  }
}

// D = 2 replicas x K = 2 cells: the all-reduce is delayed too, the weights are not changed.
TEST(EmulatedLink, DataParallelBitwiseUnchanged) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const LinkRun plain = train(4, 2, {}, "fill_drain");
  const LinkRun linked = train(4, 2, kSlowLink, "fill_drain");
  if (world_rank() >= 4) return;
  if (world_rank() == 0) EXPECT_EQ(plain.params, linked.params);
  EXPECT_EQ(plain.losses, linked.losses);
  // The modelled ring intervals of the buckets: serialized and at least the ring time.
  const LinkModel model = LinkModel::from_deck(300, 0.05);
  int rings = 0;
  double previous_end = 0;
  for (const auto& e : linked.events) {
    if (e.kind != std::int8_t(EventKind::Wire) || e.micro_batch != -1) continue;
    ++rings;
    EXPECT_GE(e.end - e.start + 1e-9, double(model.ring_allgather_ns(e.bytes, 2)) * 1e-9);
    EXPECT_GE(e.start + 1e-9, previous_end);
    previous_end = e.end;
  }
  EXPECT_GT(rings, 0);
}

// Every received message is one wire event lasting at least latency + bytes /
// bandwidth (more when it queued behind another), and the waits it caused
// are link_wait events that end no earlier than the wire event.
TEST(EmulatedLink, TraceRecordsWireTimeAndItsWait) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // 20 ms: far longer than anything else here, so the first forward on rank 1
  // must hold for its activation whatever the load
  const LinkRun r = train(2, 2, {"pipeline.link.latency_us=20000", "pipeline.link.bandwidth_gbps=0.05"},
                      "fill_drain", 2);
  if (world_rank() >= 2) return;
  const LinkModel model = LinkModel::from_deck(20000, 0.05);
  int wires = 0, waits = 0;
  for (const auto& e : r.events) {
    if (e.kind == std::int8_t(EventKind::Wire)) {
      ++wires;
      EXPECT_GT(e.bytes, 0);
      // 1 ns: the events hold seconds as doubles; the model is in integer ns
      EXPECT_GE(e.end - e.start + 1e-9, double(model.latency_ns() + model.transmit_ns(e.bytes)) * 1e-9);
    }
    if (e.kind == std::int8_t(EventKind::LinkWait)) {
      ++waits;
      // The wait ends no earlier than the arrival of its micro-batch's message.
      // (Not "starts before it": the decision to wait and the event's start
      // are two clock readings, and a rank descheduled between them, as on a
      // loaded machine, starts the event after the arrival.)
      bool covered = false;
      for (const auto& w : r.events)
        covered |= w.kind == std::int8_t(EventKind::Wire) && w.step == e.step &&
                   w.micro_batch == e.micro_batch && e.end + 1e-9 >= w.end;
      EXPECT_TRUE(covered) << "link_wait of micro-batch " << e.micro_batch << " at step " << e.step;
    }
  }
  // 2 steps x 4 micro-batches: rank 0 receives 4 gradients, rank 1 4 activations per step
  EXPECT_EQ(wires, 2 * 4);
  EXPECT_GT(waits, 0);
}

}  // namespace
}  // namespace gpipe

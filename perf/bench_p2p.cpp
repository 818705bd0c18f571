// MPI point-to-point between 2 ranks at activation-sized messages, through
// gpipe's BoundaryBuffer (the same path the pipeline uses): ping-pong
// latency (half the round trip) and bandwidth.
//   mpirun -n 2 build/perf/gpipe_bench_p2p

#include <mpi.h>

#include <chrono>

#include "bench_common.hpp"
#include "gpipe/pipeline/transport.hpp"

namespace {

// Arg: rows of a (rows, 1024) float activation.
void PingPong(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = 1024;
  gpipe::Communicator comm(MPI_COMM_WORLD);
  gpipe::BoundaryBuffer<float> out("bench::out", rows, cols), in("bench::in", rows, cols);
  const int rank = comm.rank(), peer = 1 - rank;
  const double seconds = gpipe::bench::timed(state, [&] {
    if (rank == 0) {
      in.post_recv(comm.get(), peer, 1, rows, "pong");
      out.post_send(comm.get(), peer, 0, rows);
      out.wait();
      in.wait();
    } else {
      in.post_recv(comm.get(), peer, 0, rows, "ping");
      in.wait();
      out.post_send(comm.get(), peer, 1, rows);
      out.wait();
    }
  });
  const double bytes = double(rows * cols * sizeof(float));
  state.counters["bytes"] = bytes;
  state.counters["latency_us"] = 0.5e6 * seconds / double(state.iterations());
  state.counters["GB/s"] = 2.0 * bytes * double(state.iterations()) / seconds * 1e-9;
}

// Fixed iteration counts: both ranks must run the same number of exchanges.
BENCHMARK(PingPong)->Arg(1)->Arg(16)->Arg(32)->Arg(256)->Iterations(2000)->UseManualTime()->Unit(
    benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_mpi_benchmarks(argc, argv, "gpipe_bench_p2p", 2, 2);
}

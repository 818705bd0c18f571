// The bucketed gradient all-reduce of hybrid data x pipeline parallelism,
// through gpipe's GradientReducer (the same object the pipeline uses): a
// cell's 16 MiB of float gradients in 256 layers of 64 KiB, reduced over all
// ranks (the replica group = MPI_COMM_WORLD), for several bucket sizes, in
// both modes (MPI_Iallreduce, and the deterministic all-gather + fixed-order
// sum). No compute to overlap with: every layer is made final at once, so
// this is the reduction's own cost.
//   mpirun -n 2 build/perf/gpipe_bench_allreduce --benchmark_counters_tabular=true
//   mpirun -n 4 build/perf/gpipe_bench_allreduce --benchmark_counters_tabular=true

#include <mpi.h>

#include <chrono>
#include <vector>

#include "bench_common.hpp"
#include "gpipe/parallel/gradient_reducer.hpp"

namespace {

constexpr std::int64_t kLayerFloats = 16 * 1024;  // 64 KiB of float gradients per layer
constexpr int kLayers = 256;                      // 16 MiB per cell

// Arg: bucket size in KiB (parallel.bucket_kib).
void reduce(benchmark::State& state, bool deterministic) {
  const std::int64_t bucket_bytes = state.range(0) * 1024;
  std::vector<std::int64_t> offsets(kLayers + 1);
  for (int l = 0; l <= kLayers; ++l) offsets[size_t(l)] = std::int64_t(l) * kLayerFloats;
  // Zeros: the sums stay finite however many iterations run (the speed does not depend on the values).
  gpipe::Vector<float> grads("bench::gradients", size_t(offsets.back()));
  gpipe::GradientReducer<float> reducer(MPI_COMM_WORLD, grads, offsets, bucket_bytes, deterministic);
  double total = 0;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);  // every rank starts the step together; not timed
    const auto start = std::chrono::steady_clock::now();
    for (int l = kLayers - 1; l >= 0; --l) reducer.layer_ready(l);  // the drain's order
    reducer.finish();
    gpipe::compat::fence("gpipe::bench::allreduce");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += seconds;
    state.SetIterationTime(seconds);
  }
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const double bytes = double(offsets.back()) * sizeof(float);
  state.counters["ranks"] = ranks;
  state.counters["buckets"] = reducer.buckets();
  state.counters["ms"] = 1e3 * total / double(state.iterations());
  // gradient bytes reduced per second ("algorithm bandwidth")
  state.counters["GB/s"] = bytes * double(state.iterations()) / total * 1e-9;
}

void Iallreduce(benchmark::State& state) { reduce(state, false); }
void Deterministic(benchmark::State& state) { reduce(state, true); }

// Fixed iteration counts: every rank must run the same number of collectives.
#define GPIPE_BUCKETS(f)                                                                           \
  BENCHMARK(f)->ArgName("bucket_kib")->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Arg(16384)->Iterations(20) \
      ->UseManualTime()->Unit(benchmark::kMillisecond)
GPIPE_BUCKETS(Iallreduce);
GPIPE_BUCKETS(Deterministic);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_mpi_benchmarks(argc, argv, "gpipe_bench_allreduce", 2, 1 << 30);
}

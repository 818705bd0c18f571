// One full training step (zero gradients, M forward and backward passes,
// optimizer update) of the deep deck on one cell (K = 1): time, samples/s,
// and the fraction of the step spent inside KokkosBlas::gemm (measured with
// Kokkos Tools region callbacks on KokkosBlas' own "KokkosBlas::gemm" regions).
//   build/perf/gpipe_bench_cell_step [--benchmark_counters_tabular=true]

#include <mpi.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "bench_common.hpp"
#include "gpipe/train/pipeline.hpp"

namespace {

using Clock = std::chrono::steady_clock;
std::vector<std::pair<bool, Clock::time_point>> open_regions;  // is gemm, start
double gemm_seconds = 0;

void on_push(const char* name) {
  open_regions.emplace_back(std::strncmp(name, "KokkosBlas::gemm", 16) == 0, Clock::now());
}
void on_pop() {
  if (open_regions.empty()) return;
  if (open_regions.back().first)
    gemm_seconds += std::chrono::duration<double>(Clock::now() - open_regions.back().second).count();
  open_regions.pop_back();
}

// Arg: M (micro-batches per mini-batch of 256).
void CellStep(benchmark::State& state) {
  const auto deck = gpipe::load_deck(GPIPE_DEEP_DECK, {"training.micro_batches=" + std::to_string(state.range(0))});
  gpipe::Pipeline<float> trainer(deck, MPI_COMM_SELF);
  const std::int64_t n = deck.training.batch_size;
  gpipe::Dataset data;
  data.samples = n;
  data.features = deck.model.input_features;
  data.inputs.assign(size_t(n * data.features), 0.25f);
  for (std::int64_t i = 0; i < n; ++i) data.labels.push_back(std::int32_t(i % 10));
  const auto order = gpipe::epoch_order(n, 1, 0, false);
  for (int warm = 0; warm < 2; ++warm) trainer.step(data, order, 0, n);
  Kokkos::Tools::Experimental::set_push_region_callback(on_push);
  Kokkos::Tools::Experimental::set_pop_region_callback(on_pop);
  gemm_seconds = 0;
  const double seconds = gpipe::bench::timed(state, [&] { trainer.step(data, order, 0, n); });
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
  state.counters["samples/s"] = gpipe::bench::rate(state, double(n));
  state.counters["gemm_fraction"] = gemm_seconds / seconds;
}

BENCHMARK(CellStep)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return gpipe::bench::run_benchmarks(argc, argv);
}

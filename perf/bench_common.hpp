#pragma once
// Shared helpers of the Google Benchmark suite: manual timing around fences
// and a context that records the build.

#include <benchmark/benchmark.h>

#include <chrono>

#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/core/runtime.hpp"

namespace gpipe::bench {

/// Times `body` per iteration with a fence at the end (SetIterationTime).
template <class F>
void timed(benchmark::State& state, F&& body) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    body();
    compat::fence("gpipe::bench");
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

/// A rate counter: `amount` per iteration, reported per second (e.g. GFLOP/s).
inline benchmark::Counter rate(const benchmark::State& state, double amount) {
  return benchmark::Counter(amount * double(state.iterations()), benchmark::Counter::kIsRate);
}

inline void add_build_context() { benchmark::AddCustomContext("gpipe_build", build_description()); }

}  // namespace gpipe::bench

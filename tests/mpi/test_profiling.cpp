// Kokkos Tools view of a training step (ctest runs this at 1-4 ranks): the
// steady-state step allocates no memory, every kernel carries a label, and
// the cell operations appear as profiling regions.

#include <gtest/gtest.h>
#include <mpi.h>

#include <set>
#include <string>

#include "../common/test_util.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

int allocations = 0;
std::set<std::string> kernels, regions;

void on_allocate(Kokkos::Profiling::SpaceHandle, const char*, const void*, std::uint64_t) { ++allocations; }
void on_kernel(const char* name, std::uint32_t, std::uint64_t*) { kernels.insert(name); }
void on_region(const char* name) { regions.insert(name); }

void listen(bool on) {
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_allocate_data_callback(on ? on_allocate : nullptr);
  tools::set_begin_parallel_for_callback(on ? on_kernel : nullptr);
  tools::set_begin_parallel_reduce_callback(on ? on_kernel : nullptr);
  tools::set_push_region_callback(on ? on_region : nullptr);
}

TEST(Profiling, SteadyStateStepAllocatesNothingAndIsLabelled) {
  const Deck deck = parse_deck(
      test::deck_text("[{type: dense, units: 16}, {type: layer_norm}, {type: gelu}, {type: dropout, rate: 0.3}, "
                      "{type: dense, units: 8}, {type: tanh}, {type: dense, units: 4}]",
                      6, 12, 3, "float", "{remat: except_last}"),
      "d");
  const Dataset data = test::synthetic(24, 6, 4, 3);
  const auto order = epoch_order(data.samples, 1, 0, true);
  Pipeline<float> trainer(deck, MPI_COMM_WORLD);
  for (int s = 0; s < 2; ++s) trainer.step(data, order, (s % 2) * 12, 12);  // warm-up: first-use buffers
  allocations = 0;
  kernels.clear();
  regions.clear();
  listen(true);
  for (int s = 0; s < 3; ++s) trainer.step(data, order, (s % 2) * 12, 12);
  listen(false);
  EXPECT_EQ(allocations, 0) << "a steady-state training step allocated Views";
  EXPECT_FALSE(kernels.empty());
  for (const auto& k : kernels)
    EXPECT_TRUE(k.rfind("gpipe::", 0) == 0 || k.rfind("Kokkos::", 0) == 0 || k.rfind("KokkosBlas::", 0) == 0)
        << "unlabelled kernel: " << k;
  bool has_dense = false;
  for (const auto& layer : trainer.cell().layers()) has_dense |= layer->type() == "dense";
  // Dense's forward is the kernel seam's gemm_bias (a region: its oneDNN implementation launches no Kokkos kernel).
  EXPECT_EQ(regions.count("gpipe::kernels::gemm_bias"), has_dense ? 1u : 0u);
  EXPECT_TRUE(kernels.count("gpipe::Adam::step"));
  for (const char* r : {"gpipe::forward", "gpipe::backward", "gpipe::recompute", "gpipe::optimizer",
                        "gpipe::wait"})
    EXPECT_TRUE(regions.count(r)) << r;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) EXPECT_TRUE(regions.count("gpipe::send"));
  if (size > 1) EXPECT_TRUE(regions.count("gpipe::receive"));  // one cell receives nothing
}

}  // namespace
}  // namespace gpipe

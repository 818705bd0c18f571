// pipeline.tf32 reaches the kernel seam through Pipeline's constructor (every
// rank sets the process-wide permission before any layer exists), and where
// no implementation has TF32 (every CPU build) rank 0 logs the "no effect"
// note once per process; a deck without the key turns TF32 off again. With
// a TF32 implementation (cuBLAS / cuDNN on a GPU of compute capability >= 8)
// there is no note and the summary names the primitives that use it.

#include <gtest/gtest.h>
#include <mpi.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "../common/mpi_util.hpp"
#include "../common/test_util.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {
namespace {

using test::world_rank;
using test::world_size;

std::string deck(const std::string& pipeline) {
  return test::deck_text("[{type: dense, units: 6}, {type: relu}, {type: dense, units: 6}, {type: relu}, {type: dense, units: 3}]",
                         5, 8, 2, "float",
                         pipeline);
}

// The text rank 0 logged while `make` ran.
template <class F>
std::string logged(F make) {
  std::ostringstream said;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(said);
  auto saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  make();
  spdlog::set_default_logger(saved);
  return said.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Tf32Pipeline, TheKeyReachesTheSeamAndTheNoteComesOnce) {
  kernels::set_tf32(false);
  bool tf32 = false;
  for (kernels::Primitive p : {kernels::Primitive::gemm, kernels::Primitive::gemm_bias,
                               kernels::Primitive::batched_gemm, kernels::Primitive::conv2d})
    tf32 = tf32 || kernels::has_tf32(kernels::implementation(p, 4), p);
  const std::string first = logged([] { Pipeline<float> p(parse_deck(deck("{tf32: true}"), "d"), MPI_COMM_WORLD); });
  EXPECT_TRUE(kernels::tf32_allowed());
  const std::string second = logged([] { Pipeline<float> p(parse_deck(deck("{tf32: true}"), "d"), MPI_COMM_WORLD); });
  EXPECT_TRUE(kernels::tf32_allowed());
  const std::string note = "pipeline.tf32: true has no effect in this run";
  if (tf32) {
    EXPECT_EQ(count(first, note), 0) << first;
    EXPECT_EQ(kernels::tf32_summary().rfind("tf32 on: gemm", 0), 0u) << kernels::tf32_summary();
  } else {
    EXPECT_EQ(count(first, note), world_rank() == 0 ? 1 : 0) << first;
    EXPECT_EQ(kernels::tf32_summary(),
              "tf32 requested, no effect: no float primitive of this run has TF32 (fp32 throughout)");
  }
  EXPECT_EQ(count(second, note), 0) << "once per process: " << second;
  { Pipeline<float> p(parse_deck(deck("{}"), "d"), MPI_COMM_WORLD); }
  EXPECT_FALSE(kernels::tf32_allowed());
  EXPECT_EQ(kernels::tf32_summary(), "tf32 off");
  MPI_Barrier(MPI_COMM_WORLD);
  (void)world_size;
}

}  // namespace
}  // namespace gpipe

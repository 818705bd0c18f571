// Issue 25's hazards, each with its exact error: flat() of a view that is not
// contiguous, MPI counts and message tags beyond int and MPI_TAG_UB, and the
// fixed-order sums' lanes per backend.

#include <gtest/gtest.h>
#include <mpi.h>

#include <limits>

#include "gpipe/core/error.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "gpipe/core/views.hpp"
#include "gpipe/pipeline/transport.hpp"

namespace gpipe {
namespace {

TEST(Contracts, FlatNeedsAContiguousView) {
  Matrix<double> m("m", 4, 3);
  EXPECT_EQ(flat(m).extent(0), 12u);
  EXPECT_EQ(flat(leading_rows(m, 2)).extent(0), 6u);  // the leading rows of a row-major matrix
  EXPECT_EQ(flat(leading_rows(m, 2)).data(), m.data());
  const auto column = Kokkos::subview(m, Kokkos::ALL, 1);  // stride 3: not contiguous
  try {
    flat(column);
    ADD_FAILURE() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "gpipe::flat: view 'm' is not contiguous (4 elements in a span of 12)");
  }
  const auto columns = Kokkos::subview(m, Kokkos::ALL, std::make_pair(0, 2));  // 4 x 2 of 4 x 3
  EXPECT_THROW(flat(columns), std::logic_error);
}

TEST(Contracts, MessageCountsAndTags) {
  EXPECT_EQ(mpi_count(5, "x"), 5);
  EXPECT_EQ(mpi_count(std::numeric_limits<int>::max(), "x"), std::numeric_limits<int>::max());
  try {
    mpi_count(std::int64_t(1) << 31, "the forward activation of micro-batch 3");
    ADD_FAILURE() << "expected PipelineError";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "the forward activation of micro-batch 3: 2147483648 elements, more than one "
                           "MPI message carries (2^31 - 1)");
  }
  EXPECT_EQ(forward_tag(3), 6);
  EXPECT_EQ(backward_tag(3), 7);
  EXPECT_EQ(backward_tag((1 << 30) - 1), std::numeric_limits<int>::max());
  try {
    forward_tag(1 << 30);  // 2^31: no int (was signed overflow)
    ADD_FAILURE() << "expected PipelineError";
  } catch (const PipelineError& e) {
    EXPECT_STREQ(e.what(), "message tag 2147483648 is outside [0, 2^31 - 1] (too many micro-batches)");
  }
  const int bound = tag_upper_bound(MPI_COMM_WORLD);
  EXPECT_GE(bound, 32767);  // the MPI standard's minimum
  EXPECT_NO_THROW(check_message_tags(MPI_COMM_WORLD, (std::int64_t(bound) + 1) / 2));
  const std::int64_t too_many = (std::int64_t(bound) + 1) / 2 + 1;
  try {
    check_message_tags(MPI_COMM_WORLD, too_many);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "training.micro_batches = " + std::to_string(too_many) +
                                         ": message tags reach 2M - 1 = " + std::to_string(2 * too_many - 1) +
                                         ", above this MPI's MPI_TAG_UB = " + std::to_string(bound));
  }
}

TEST(Contracts, SumLanesPerBackend) {
  EXPECT_EQ(sum_lanes_of<Kokkos::DefaultHostExecutionSpace>, 16);
  EXPECT_EQ(kSumLanes, sum_lanes_of<ExecSpace>);
}

}  // namespace
}  // namespace gpipe

// The stop-signal flag: the first SIGTERM/SIGUSR1 is recorded, not fatal, and
// agreed over a communicator. (The second signal's immediate exit and the whole
// stop path of gpipe-train: tests/integration/stop_signal.sh.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <csignal>

#include "gpipe/train/stop_signal.hpp"

namespace gpipe {
namespace {

TEST(StopSignal, FirstSignalIsRecordedAndAgreed) {
  install_stop_handlers();
  EXPECT_EQ(stop_signal(), 0);
  EXPECT_EQ(stop_agreed(MPI_COMM_SELF), 0);
  std::raise(SIGUSR1);  // the process goes on
  EXPECT_EQ(stop_signal(), SIGUSR1);
  EXPECT_EQ(stop_agreed(MPI_COMM_SELF), SIGUSR1);
  EXPECT_STREQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_STREQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(signal_name(SIGINT), "signal");
  // Default actions again, so that a later signal (a ctest timeout) ends this process.
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
}

}  // namespace
}  // namespace gpipe

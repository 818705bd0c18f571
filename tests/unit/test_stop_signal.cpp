// The stop-signal flag: the first SIGTERM/SIGUSR1 is recorded, not fatal, and
// agreed over a communicator; it is taken by the receiver thread, never by
// the thread that installed the handlers nor by one it starts later (a
// kernel's thread). (The second signal's immediate exit and the whole stop
// path of gpipe-train: tests/integration/stop_signal.sh.)
#include <gtest/gtest.h>
#include <mpi.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <stdexcept>
#include <thread>

#include "gpipe/train/stop_signal.hpp"

namespace gpipe {
namespace {

bool blocked_here(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

TEST(StopSignal, FirstSignalIsRecordedAgreedAndTakenByTheReceiverThread) {
  install_stop_handlers();
  EXPECT_TRUE(blocked_here(SIGTERM));
  EXPECT_TRUE(blocked_here(SIGUSR1));
  bool child_blocks = false;
  std::thread([&] { child_blocks = blocked_here(SIGTERM) && blocked_here(SIGUSR1); }).join();
  EXPECT_TRUE(child_blocks) << "a thread started after install_stop_handlers must inherit the blocked signals";
  EXPECT_EQ(stop_signal(), 0);
  EXPECT_EQ(stop_signal_receiver(), 0);
  EXPECT_EQ(stop_agreed(MPI_COMM_SELF), 0);
  EXPECT_THROW(raise_stop_signal(SIGINT), std::invalid_argument);
  raise_stop_signal(SIGUSR1);  // the process goes on
  EXPECT_EQ(stop_signal(), SIGUSR1);
  EXPECT_NE(stop_signal_receiver(), 0);
  EXPECT_NE(stop_signal_receiver(), int(syscall(SYS_gettid)));
  EXPECT_EQ(stop_agreed(MPI_COMM_SELF), SIGUSR1);
  EXPECT_STREQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_STREQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(signal_name(SIGINT), "signal");
  // Default actions again, so that a later signal (a ctest timeout) ends
  // this process (the receiver thread takes it).
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
}

}  // namespace
}  // namespace gpipe

#include "gpipe/train/stop_signal.hpp"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "gpipe/pipeline/wait.hpp"

namespace gpipe {
namespace {

volatile std::sig_atomic_t first_signal = 0;
volatile std::sig_atomic_t receiver_tid = 0;  // the thread whose handler recorded it

int this_thread_id() { return int(syscall(SYS_gettid)); }

// Async-signal-safe: only flags, gettid(2), write(2) and _exit(2).
extern "C" void on_stop_signal(int signal) {
  if (first_signal == 0) {
    receiver_tid = this_thread_id();
    first_signal = signal;
    return;
  }
  static const char message[] = "gpipe: second signal, exiting at once without a checkpoint\n";
  const ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
  _exit(128 + signal);
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

// The thread the stop signals are delivered to: the only one of the process
// (with threads started before install_stop_handlers, e.g. MPI's) that has
// them unblocked and runs no kernel. It sleeps in sigsuspend for good.
void receive_stop_signals() {
  sigset_t wait_mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &wait_mask);
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGUSR1);
  for (;;) sigsuspend(&wait_mask);
}

}  // namespace

void install_stop_handlers() {
  static bool installed = false;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // MPI and I/O calls of other threads resume after the handler
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  // Blocked in the calling thread (and so in every thread it starts from now
  // on): a handler never runs on a stack that is executing a kernel
  // (oneDNN's JIT GEMMs point rsp into the heap; a signal frame pushed there
  // corrupts it, oneDNN issue 4845).
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (!installed) {
    installed = true;
    std::thread(receive_stop_signals).detach();
  }
}

int stop_signal() { return int(first_signal); }

int stop_signal_receiver() { return int(receiver_tid); }

void raise_stop_signal(int signal) {
  if (signal != SIGTERM && signal != SIGUSR1)
    throw std::invalid_argument("gpipe::raise_stop_signal: " + std::to_string(signal) +
                                " is not a stop signal (SIGTERM or SIGUSR1)");
  const bool first = stop_signal() == 0;
  if (kill(getpid(), signal) != 0)
    throw std::runtime_error(std::string("gpipe::raise_stop_signal: kill: ") + std::strerror(errno));
  if (!first) return;  // a second signal: the process ends in the handler
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stop_signal() == 0) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(std::string("gpipe::raise_stop_signal: ") + signal_name(signal) +
                               " sent but not recorded within 10 s (install_stop_handlers not called?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int stop_agreed(MPI_Comm comm) {
  int local = stop_signal(), agreed = 0;
  exact_allreduce(&local, &agreed, 1, MPI_INT, MPI_MAX, comm);  // pipeline.wait
  return agreed;
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal";
  }
}

}  // namespace gpipe

#include "gpipe/train/stop_signal.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "gpipe/pipeline/wait.hpp"

namespace gpipe {
namespace {

volatile std::sig_atomic_t first_signal = 0;

// Async-signal-safe: only a flag, write(2) and _exit(2).
extern "C" void on_stop_signal(int signal) {
  if (first_signal == 0) {
    first_signal = signal;
    return;
  }
  static const char message[] = "gpipe: second signal, exiting at once without a checkpoint\n";
  const ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
  _exit(128 + signal);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // MPI and I/O calls resume after the handler
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int stop_signal() { return int(first_signal); }

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

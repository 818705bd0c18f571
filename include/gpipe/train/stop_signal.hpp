#pragma once
// Stopping a run cleanly on a batch system's signal: Slurm sends SIGUSR1 (or
// SIGTERM) some time before the wall-clock limit (sbatch --signal=USR1@SECONDS).
// The first signal is only recorded; the training loop asks, once per step and
// on every rank, whether any rank has received one (stop_agreed), so all ranks
// stop after the same step, write one checkpoint and exit with
// kExitStoppedBySignal. A second signal ends the process at once.

#include <mpi.h>

namespace gpipe {

/// Exit status of a run stopped by a signal after writing its checkpoint
/// (75, EX_TEMPFAIL of sysexits.h: "temporary failure, try again").
constexpr int kExitStoppedBySignal = 75;

/// Installs handlers for SIGTERM and SIGUSR1 in this process. The first
/// signal is recorded (stop_signal()); a second one writes "gpipe: second
/// signal, exiting at once without a checkpoint" to stderr and ends the
/// process with _exit(128 + signal number), e.g. 143 for SIGTERM.
/// The two signals are blocked in the calling thread, so in every thread it
/// starts afterwards, and taken by a receiver thread this call starts (once
/// per process) that runs no kernel: a handler never interrupts the thread
/// running the training loop or its kernels' threads. (oneDNN's JIT f32
/// GEMMs, which it runs on CPUs below AVX-512, point the stack pointer into
/// the heap while they run; a signal frame pushed there corrupts the heap,
/// oneDNN issue 4845. Threads started before this call, e.g. MPI's, may take
/// a signal too: their handler only records it.) Call it early in main, on
/// the thread that runs the training loop, after MPI_Init and before
/// Kokkos::initialize where that starts threads (the OpenMP backend) and
/// before the first kernel (oneDNN starts its OpenMP threads at its first
/// primitive). Calling it again re-installs the handlers and blocks the
/// signals in the calling thread. Not collective.
void install_stop_handlers();

/// Sends `signal` (SIGTERM or SIGUSR1) to this process, as a batch system
/// does (kill(2), not raise(3): the calling thread blocks it), and returns
/// once it is recorded (stop_signal() != 0), so a caller that then asks
/// stop_agreed() sees it: fault injection for tests
/// (GPIPE_FAULT_SIGNAL_AT_STEP). A second signal ends the process as any
/// second signal does. Throws std::invalid_argument for another signal, and
/// std::runtime_error when kill fails or the signal is not recorded within
/// 10 s (install_stop_handlers() was not called).
void raise_stop_signal(int signal);

/// The Linux thread id (gettid) of the thread whose handler recorded the
/// first stop signal, 0 if none: for tests and diagnostics (never the
/// thread that called install_stop_handlers()).
int stop_signal_receiver();

/// The first stop signal this process received (SIGTERM or SIGUSR1), 0 if none.
int stop_signal();

/// The largest stop signal number received by any rank of `comm` (0 if none):
/// the same value on every rank. Collective (one MPI_Allreduce of an int):
/// call it at the same point of every step on every rank.
int stop_agreed(MPI_Comm comm);

/// "SIGTERM", "SIGUSR1", else "signal".
const char* signal_name(int signal);

}  // namespace gpipe

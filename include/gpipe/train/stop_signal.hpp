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
/// process with _exit(128 + signal number), e.g. 143 for SIGTERM. Call once,
/// early in main (after MPI_Init: some MPI libraries install their own handlers).
void install_stop_handlers();

/// The first stop signal this process received (SIGTERM or SIGUSR1), 0 if none.
int stop_signal();

/// The largest stop signal number received by any rank of `comm` (0 if none):
/// the same value on every rank. Collective (one MPI_Allreduce of an int):
/// call it at the same point of every step on every rank.
int stop_agreed(MPI_Comm comm);

/// "SIGTERM", "SIGUSR1", else "signal".
const char* signal_name(int signal);

}  // namespace gpipe

#pragma once
// How a rank waits for MPI (deck key pipeline.wait): spinning in MPI's own
// progress loop, or sleeping between MPI_Test calls.

#include <mpi.h>

namespace gpipe {

/// pipeline.wait (docs/input-deck.md): how every blocking wait inside a
/// training step waits. Spin: MPI_Wait and MPI's blocking collectives (Open
/// MPI's shared-memory transport polls a core at 100 %, even with
/// `--mca mpi_yield_when_idle 1`). Sleep: MPI_Test, then sleep (a few
/// microseconds, doubling up to kWaitSleepMaxUs), test again: a waiting rank
/// leaves its core to ranks that compute, at the price of noticing an arrival
/// up to one sleep late. The operations, their order and every value are the
/// same in both: the results are bitwise equal.
enum class WaitPolicy { Spin, Sleep };

/// The longest sleep between two MPI_Test calls of WaitPolicy::Sleep, us.
constexpr int kWaitSleepMaxUs = 50;

/// Process-wide (every gpipe wait of this process; not thread-local). The
/// Pipeline constructor sets it from pipeline.wait; default Spin.
void set_wait_policy(WaitPolicy policy);
WaitPolicy wait_policy();

/// MPI_Wait(request, status) under wait_policy(): returns its error code
/// (MPI_SUCCESS or the failed request's code; with MPI_ERRORS_RETURN), the
/// request is MPI_REQUEST_NULL after a completion. `status` may be
/// MPI_STATUS_IGNORE. Not collective.
int wait_request(MPI_Request* request, MPI_Status* status);

/// MPI_Allreduce and MPI_Bcast under wait_policy(): Spin calls the blocking
/// collective; Sleep starts its non-blocking form (MPI_Iallreduce,
/// MPI_Ibcast) and waits with wait_request. Collective over `comm`, with
/// the blocking call's arguments and error code. Only for reductions whose
/// result does not depend on the reduction order (integers, MIN / MAX, a
/// broadcast): the non-blocking algorithm may sum floating-point values in
/// another order.
int exact_allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int waited_bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);

}  // namespace gpipe

#pragma once
// Shared by the command-line tools: the last line of defence around the
// work of main().

#include <mpi.h>

#include <exception>
#include <iostream>

#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"

namespace gpipe::app {

constexpr int kExitInputError = 2;    ///< bad input (deck, data, checkpoint, options)
constexpr int kExitRuntimeError = 1;  ///< anything else

/// Returns run()'s status. An agreed error (every rank throws it: a
/// gpipe::Agreed) is printed once by rank 0 as "PROGRAM: error: ..." and
/// every rank returns the same status (2 for an InputError, 1 otherwise). Any
/// other exception escaping run() (on one rank) is printed as
/// "PROGRAM: error (rank R): ..." and ends every rank with MPI_Abort with that
/// status, so no rank is left waiting in a collective.
template <class F>
int abort_on_error(const char* program, int rank, F&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    const int status = dynamic_cast<const InputError*>(&e) ? kExitInputError : kExitRuntimeError;
    if (dynamic_cast<const Agreed*>(&e)) {
      if (rank == 0) std::cerr << program << ": error: " << e.what() << "\n";
      return status;
    }
    std::cerr << program << ": error (rank " << rank << "): " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  return kExitRuntimeError;
}

}  // namespace gpipe::app

#pragma once
// Shared by the command-line tools: the last line of defence around the
// work of main().

#include <mpi.h>

#include <exception>
#include <iostream>

#include "gpipe/core/error.hpp"

namespace gpipe::app {

constexpr int kExitInputError = 2;    ///< bad input (deck, data, checkpoint, options)
constexpr int kExitRuntimeError = 1;  ///< anything else

/// Returns run()'s status; an exception escaping it (on one rank) is printed
/// as "PROGRAM: error (rank R): ..." and ends every rank with MPI_Abort:
/// status 2 for an InputError, 1 otherwise, so no rank is left waiting.
template <class F>
int abort_on_error(const char* program, int rank, F&& run) {
  try {
    return run();
  } catch (const InputError& e) {
    std::cerr << program << ": error (rank " << rank << "): " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, kExitInputError);
  } catch (const std::exception& e) {
    std::cerr << program << ": error (rank " << rank << "): " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, kExitRuntimeError);
  }
  return kExitRuntimeError;
}

}  // namespace gpipe::app

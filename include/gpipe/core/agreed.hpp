#pragma once
// Agreed failure (docs/design.md, "Agreed failure"): a rank-local outcome
// (an exception, a bad value, an I/O error) becomes one collective decision
// before the next collective call, so no rank waits forever in a collective
// that a failed rank never enters, and every rank reports the same error.

#include <mpi.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "gpipe/core/error.hpp"

namespace gpipe {

/// Marks an exception that every rank of the communicator throws, with the
/// same type and message (so one rank may report it and all may return
/// normally instead of aborting).
struct Agreed {
  virtual ~Agreed() = default;
};

/// An error of type E (InputError, PipelineError, std::runtime_error) that
/// is Agreed: catch it as E, and test for Agreed with dynamic_cast.
template <class E>
class AgreedError : public E, public Agreed {
 public:
  using E::E;
};

/// The outcome every rank agreed on.
struct Agreement {
  bool failed = false;    ///< true on every rank if any rank failed
  int first_rank = -1;    ///< lowest failing rank (-1: none)
  int kind = 0;           ///< 1: InputError, 2: PipelineError, 3: other error
  std::string message;    ///< the first failing rank's message, on every rank
};

/// Collective over `comm`: one MPI_Allreduce of a flag; on failure also one
/// broadcast of the first failing rank's message. `kind` as in Agreement
/// (0 = this rank succeeded).
Agreement agree(int kind, const std::string& message, MPI_Comm comm);

/// Collective: true on every rank if `local` is true on any rank (one
/// MPI_Allreduce of an int with MPI_LOR).
bool any_rank(bool local, MPI_Comm comm);

/// Runs `f` on every rank of `comm` (collective), then agrees on its outcome:
/// if `f` threw on any rank, every rank throws the first failing rank's error,
/// with the same type (InputError, PipelineError, else std::runtime_error)
/// and message, so exactly one rank needs to print it.
template <class F>
void agreed(MPI_Comm comm, F&& f);

/// Throws the agreed error of `a` (if failed) on this rank, as an
/// AgreedError of the original type.
void throw_agreed(const Agreement& a);

/// kind and message of the exception `e` (see Agreement::kind).
int error_kind(const std::exception& e);

template <class F>
void agreed(MPI_Comm comm, F&& f) {
  int kind = 0;
  std::string message;
  try {
    f();
  } catch (const std::exception& e) {
    kind = error_kind(e);
    message = e.what();
  }
  throw_agreed(agree(kind, message, comm));
}

}  // namespace gpipe

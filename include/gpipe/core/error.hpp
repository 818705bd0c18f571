#pragma once
// Error types thrown by gpipe. Every message names the file, field or rank and
// says what was expected and what was found.

#include <stdexcept>
#include <string>

namespace gpipe {

/// Invalid user input: an input deck, a data file, a command-line option.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A failure of the pipeline at run time (e.g. an MPI message of the wrong size).
class PipelineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A call in the wrong state: the library is not initialized, or an object
/// was left unusable by an earlier failure (C API: GPIPE_ERROR_STATE).
class StateError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Throws InputError(message) when `condition` is false.
void require(bool condition, const std::string& message);

}  // namespace gpipe

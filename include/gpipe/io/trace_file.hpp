#pragma once
// Writing pipeline traces to HDF5 (layout: docs/file-formats.md, "Traces").

#include <mpi.h>

#include <string>
#include <vector>

#include "gpipe/pipeline/trace.hpp"

namespace gpipe {

/// Run-level attributes of a trace file.
struct TraceHeader {
  int ranks = 1;
  int micro_batches = 1;
  std::int64_t batch_size = 0;
  std::string remat;
  std::string deck;
  double bubble_fraction_analytical = 0;
  double bubble_fraction_measured = 0;  ///< filled by gather_trace
};

/// Every rank's events and step summaries, gathered on rank 0 of `comm`
/// (empty elsewhere). Collective.
struct GatheredTrace {
  std::vector<std::vector<TraceEvent>> events;  ///< [rank]
  std::vector<std::vector<StepSummary>> steps;  ///< [rank]
  /// Mean over ranks and recorded steps of idle_time / step_time.
  double measured_bubble() const;
};
GatheredTrace gather_trace(const Tracer& tracer, MPI_Comm comm);

/// Writes `trace` to `path` (rank 0 only; serial HDF5), via a temporary
/// file renamed into place. Throws InputError if the file cannot be written.
void write_trace_file(const std::string& path, const TraceHeader& header, const GatheredTrace& trace);

}  // namespace gpipe

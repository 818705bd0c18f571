#pragma once
// Writing pipeline traces to HDF5 (layout: docs/file-formats.md, "Traces").

#include <mpi.h>

#include <string>
#include <vector>

#include "gpipe/pipeline/trace.hpp"

namespace gpipe {

/// Run-level attributes of a trace file.
struct TraceHeader {
  int ranks = 1;                 ///< all ranks: replicas x cells
  int replicas = 1;              ///< D
  int cells = 1;                 ///< K
  std::string placement = "replica";
  int micro_batches = 1;
  std::int64_t batch_size = 0;
  std::string remat;
  std::string schedule = "fill_drain";  ///< pipeline.schedule
  std::string deck;
  double bubble_fraction_analytical = 0;
  double bubble_fraction_measured = 0;  ///< filled by gather_trace
  std::string run_record;  ///< JSON text: effective deck, command line, hosts, versions, times (may be empty)
};

/// Every rank's events and step summaries, gathered on rank 0 of `comm`
/// (empty elsewhere). Collective.
struct GatheredTrace {
  std::vector<std::vector<TraceEvent>> events;  ///< [rank]
  std::vector<std::vector<StepSummary>> steps;  ///< [rank]
  /// Mean over ranks and recorded steps of idle_time / step_time, without
  /// each rank's first recorded step (the warm-up) when it recorded more.
  double measured_bubble() const;
  /// Communication per recorded step and rank, split into its two parts.
  struct Communication {
    double pipeline_seconds = 0;       ///< send + receive postings (point-to-point)
    double data_parallel_seconds = 0;  ///< reduce_wait: gradient reduction not hidden
    double allreduce_seconds = 0;      ///< first bucket posted to last bucket completed
    /// 1 - data_parallel / allreduce: the share of the reduction hidden
    /// behind backward compute (0 without data parallelism).
    double overlap_fraction = 0;
    /// Emulated link (pipeline.link), per recorded step and rank, without
    /// each rank's first recorded step when it recorded more: the time some
    /// message to the rank was on the wire (union of its wire events) ...
    double link_wire_seconds = 0;
    /// ... the time it was blocked waiting for an arrival (link_wait) ...
    double link_wait_seconds = 0;
    /// ... and 1 - link_wait / link_wire, both summed over ranks and steps:
    /// the share of the wire time hidden behind compute (0 without a link).
    double link_overlap_fraction = 0;
  };
  Communication communication() const;

 private:
  void link_totals(Communication& c) const;
};
GatheredTrace gather_trace(const Tracer& tracer, MPI_Comm comm);

/// Writes `trace` to `path` (rank 0 only; serial HDF5), via a temporary
/// file renamed into place. Throws InputError if the file cannot be written.
void write_trace_file(const std::string& path, const TraceHeader& header, const GatheredTrace& trace);

}  // namespace gpipe

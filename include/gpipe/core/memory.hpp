#pragma once
// Measured memory: the bytes of Kokkos allocations live in each memory space
// and their high-water mark, from Kokkos Tools' allocation callbacks
// (Kokkos::Tools::Experimental::set_allocate_data_callback and
// set_deallocate_data_callback), and the process's peak resident set size
// (getrusage). The planner's prediction (train/memory.hpp) is checked
// against these numbers (tests/mpi/test_memory.cpp, scripts/check_memory_model.py).
//
// The tracker installs the two callbacks process-wide; Kokkos 3.4 keeps one
// callback per event, so a Kokkos Tools library loaded with
// KOKKOS_PROFILE_LIBRARY (or a test that sets its own allocate callback)
// replaces it while active. Not collective; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::memory {

/// Installs the allocation callbacks (idempotent) and clears the counters.
/// Call after Kokkos::initialize. Allocations made before it are not seen,
/// and their deallocations are ignored (an unknown pointer).
void start_tracking();
/// Removes the callbacks (the counters keep their last values).
void stop_tracking();
/// Whether start_tracking is in force.
bool tracking();

/// Bytes of the allocations in memory space `space` (a Kokkos space name,
/// e.g. "Host", "Cuda"; "" = every space) that are live now.
std::int64_t live_bytes(const std::string& space = "");
/// The largest live_bytes(space) seen since start_tracking or reset_peak.
std::int64_t peak_bytes(const std::string& space = "");
/// Restarts the high-water marks at the live bytes.
void reset_peak();

/// One live allocation: its View label, memory space and bytes (the size
/// Kokkos reports: the data, without the allocation's header).
struct Allocation {
  std::string label;
  std::string space;
  std::int64_t bytes = 0;
};
/// Every allocation live now, in allocation order.
std::vector<Allocation> live_allocations();

/// The Kokkos name of the memory space Views are allocated in
/// (gpipe/core/views.hpp's MemSpace), e.g. "Host" or "Cuda".
std::string device_space_name();

/// Peak resident set size of this process, bytes (getrusage ru_maxrss).
std::int64_t peak_rss_bytes();
/// Resident set size now, bytes (/proc/self/statm; 0 where unavailable).
std::int64_t rss_bytes();

}  // namespace gpipe::memory

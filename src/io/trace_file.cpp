#include "gpipe/io/trace_file.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "gpipe/config.hpp"
#include "gpipe/core/error.hpp"
#include "hdf5_handle.hpp"

namespace gpipe {

namespace {
// Gathers a vector of POD records from every rank onto rank 0.
template <class Record>
std::vector<std::vector<Record>> gather_records(const std::vector<Record>& mine, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int bytes = int(mine.size() * sizeof(Record));
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size), 0);
  MPI_Gather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::vector<char> all;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) displs[size_t(r)] = displs[size_t(r) - 1] + counts[size_t(r) - 1];
    all.resize(size_t(displs.back() + counts.back()));
  }
  MPI_Gatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0, comm);
  std::vector<std::vector<Record>> out;
  if (rank != 0) return out;
  for (int r = 0; r < size; ++r) {
    const auto* first = reinterpret_cast<const Record*>(all.data() + displs[size_t(r)]);
    out.emplace_back(first, first + counts[size_t(r)] / int(sizeof(Record)));
  }
  return out;
}

h5::Handle event_type() {
  h5::Handle kind = h5::datatype(H5Tenum_create(H5T_NATIVE_INT8));
  const char* names[] = {"forward",   "backward",    "recompute",      "send",
                         "receive",   "wait",        "optimizer",      "allreduce",
                         "reduce_wait", "backward_input", "backward_weights", "wire",
                         "link_wait"};
  for (std::int8_t v = 0; v < 13; ++v) H5Tenum_insert(kind.get(), names[v], &v);
  h5::Handle t = h5::datatype(H5Tcreate(H5T_COMPOUND, sizeof(TraceEvent)));
  H5Tinsert(t.get(), "step", HOFFSET(TraceEvent, step), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "kind", HOFFSET(TraceEvent, kind), kind.get());
  H5Tinsert(t.get(), "micro_batch", HOFFSET(TraceEvent, micro_batch), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "start", HOFFSET(TraceEvent, start), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "end", HOFFSET(TraceEvent, end), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "bytes", HOFFSET(TraceEvent, bytes), H5T_NATIVE_INT64);
  return t;
}

h5::Handle step_type() {
  h5::Handle t = h5::datatype(H5Tcreate(H5T_COMPOUND, sizeof(StepSummary)));
  H5Tinsert(t.get(), "step", HOFFSET(StepSummary, step), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "start", HOFFSET(StepSummary, start), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "end", HOFFSET(StepSummary, end), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "step_time", HOFFSET(StepSummary, step_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "compute_time", HOFFSET(StepSummary, compute_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "comm_time", HOFFSET(StepSummary, comm_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "idle_time", HOFFSET(StepSummary, idle_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "idle_fraction", HOFFSET(StepSummary, idle_fraction), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "peak_activation_bytes", HOFFSET(StepSummary, peak_activation_bytes), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "other_time", HOFFSET(StepSummary, other_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "step_ns", HOFFSET(StepSummary, step_ns), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "compute_ns", HOFFSET(StepSummary, compute_ns), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "comm_ns", HOFFSET(StepSummary, comm_ns), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "idle_ns", HOFFSET(StepSummary, idle_ns), H5T_NATIVE_INT64);
  H5Tinsert(t.get(), "other_ns", HOFFSET(StepSummary, other_ns), H5T_NATIVE_INT64);
  return t;
}

template <class Record>
void write_table(hid_t group, const char* name, hid_t type, const std::vector<Record>& rows,
                 const std::string& path) {
  const hsize_t n = rows.size();
  const h5::Handle space = h5::dataspace(H5Screate_simple(1, &n, nullptr));
  const h5::Handle d = h5::dataset(H5Dcreate2(group, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!d.valid() || (n > 0 && H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0))
    throw InputError(fmt::format("{}: writing dataset {} failed", path, name));
}
}  // namespace

double GatheredTrace::measured_bubble() const {
  double sum = 0;
  std::size_t count = 0;
  for (const auto& rank_steps : steps)
    for (std::size_t i = rank_steps.size() > 1 ? 1 : 0; i < rank_steps.size(); ++i) {
      sum += rank_steps[i].idle_fraction;
      ++count;
    }
  return count ? sum / double(count) : 0.0;
}

GatheredTrace::Communication GatheredTrace::communication() const {
  Communication c;
  std::size_t rank_steps = 0, reducing = 0;
  double hidden = 0;
  for (std::size_t r = 0; r < steps.size(); ++r)
    for (const auto& s : steps[r]) {
      ++rank_steps;
      double p2p = 0, wait = 0, first = 0, last = 0;
      bool any = false;
      for (const auto& e : events[r]) {
        if (e.step != s.step) continue;
        const auto kind = EventKind(e.kind);
        if (kind == EventKind::Send || kind == EventKind::Receive) p2p += e.end - e.start;
        if (kind == EventKind::ReduceWait) wait += e.end - e.start;
        if (kind == EventKind::AllReduce) {
          first = any ? std::min(first, e.start) : e.start;
          last = any ? std::max(last, e.end) : e.end;
          any = true;
        }
      }
      c.pipeline_seconds += p2p;
      c.data_parallel_seconds += wait;
      if (any) {
        ++reducing;
        c.allreduce_seconds += last - first;
        if (last > first) hidden += std::clamp(1.0 - wait / (last - first), 0.0, 1.0);
      }
    }
  if (rank_steps) {
    c.pipeline_seconds /= double(rank_steps);
    c.data_parallel_seconds /= double(rank_steps);
  }
  if (reducing) {
    c.allreduce_seconds /= double(reducing);
    c.overlap_fraction = hidden / double(reducing);
  }
  link_totals(c);
  return c;
}

void GatheredTrace::link_totals(Communication& c) const {
  std::size_t rank_steps = 0;
  for (std::size_t r = 0; r < steps.size(); ++r)
    for (std::size_t i = steps[r].size() > 1 ? 1 : 0; i < steps[r].size(); ++i) {
      const std::int64_t step = steps[r][i].step;
      std::vector<std::pair<double, double>> wires;
      for (const auto& e : events[r]) {
        if (e.step != step) continue;
        if (EventKind(e.kind) == EventKind::Wire) wires.emplace_back(e.start, e.end);
        if (EventKind(e.kind) == EventKind::LinkWait) c.link_wait_seconds += e.end - e.start;
      }
      std::sort(wires.begin(), wires.end());
      double covered = 0, end = -1e300;  // the union of the wire intervals
      for (const auto& [a, b] : wires) {
        if (b <= end) continue;
        covered += b - std::max(a, end);
        end = b;
      }
      c.link_wire_seconds += covered;
      ++rank_steps;
    }
  if (c.link_wire_seconds > 0)
    c.link_overlap_fraction = std::clamp(1.0 - c.link_wait_seconds / c.link_wire_seconds, 0.0, 1.0);
  if (rank_steps) {
    c.link_wire_seconds /= double(rank_steps);
    c.link_wait_seconds /= double(rank_steps);
  }
}

GatheredTrace gather_trace(const Tracer& tracer, MPI_Comm comm) {
  GatheredTrace t;
  t.events = gather_records(tracer.events(), comm);
  t.steps = gather_records(tracer.steps(), comm);
  return t;
}

void write_trace_file(const std::string& path, const TraceHeader& header, const GatheredTrace& trace) {
  h5::silence_errors();
  const std::string tmp = path + ".tmp";
  {
    std::error_code ec;
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    const h5::Handle file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) throw InputError(fmt::format("{}: cannot create trace file", tmp));
    const hid_t root = file.get();
    h5::write_attribute(root, "format_version", 1LL);
    h5::write_attribute(root, "ranks", (long long)header.ranks);
    h5::write_attribute(root, "replicas", (long long)header.replicas);
    h5::write_attribute(root, "cells", (long long)header.cells);
    h5::write_attribute(root, "placement", header.placement);
    h5::write_attribute(root, "micro_batches", (long long)header.micro_batches);
    h5::write_attribute(root, "batch_size", (long long)header.batch_size);
    h5::write_attribute(root, "remat", header.remat);
    h5::write_attribute(root, "schedule", header.schedule);
    h5::write_attribute(root, "deck", header.deck);
    h5::write_attribute(root, "library_version", std::string(GPIPE_VERSION_STRING));
    h5::write_attribute(root, "bubble_fraction_analytical", header.bubble_fraction_analytical);
    h5::write_attribute(root, "bubble_fraction_measured", trace.measured_bubble());
    if (!header.run_record.empty()) h5::write_attribute(root, "run_record", header.run_record);
    const h5::Handle events = event_type(), steps = step_type();
    for (std::size_t r = 0; r < trace.events.size(); ++r) {
      const h5::Handle g = h5::group(H5Gcreate2(root, fmt::format("rank_{:04d}", r).c_str(), H5P_DEFAULT,
                                                H5P_DEFAULT, H5P_DEFAULT));
      write_table(g.get(), "events", events.get(), trace.events[r], tmp);
      write_table(g.get(), "steps", steps.get(), trace.steps[r], tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw InputError(fmt::format("{}: cannot rename {} into place", path, tmp));
}

}  // namespace gpipe

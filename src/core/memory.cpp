#include "gpipe/core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <map>
#include <mutex>

#include "gpipe/core/views.hpp"

namespace gpipe::memory {

namespace {

struct Live {
  std::string label, space;
  std::int64_t bytes = 0;
  std::uint64_t order = 0;
};

struct Counters {
  std::int64_t live = 0, peak = 0;
};

struct State {
  std::mutex mutex;
  bool on = false;
  std::uint64_t next = 0;
  std::map<const void*, Live> live;
  std::map<std::string, Counters> spaces;  // by space name; "" = all
};

State& state() {
  static State s;
  return s;
}

void on_allocate(Kokkos::Profiling::SpaceHandle space, const char* label, const void* ptr, std::uint64_t size) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.on || ptr == nullptr) return;
  const std::string name = space.name;
  s.live[ptr] = Live{label ? label : "", name, std::int64_t(size), s.next++};
  for (const std::string& key : {name, std::string()}) {
    auto& c = s.spaces[key];
    c.live += std::int64_t(size);
    if (c.live > c.peak) c.peak = c.live;
  }
}

void on_deallocate(Kokkos::Profiling::SpaceHandle, const char*, const void* ptr, std::uint64_t) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.live.find(ptr);
  if (it == s.live.end()) return;  // allocated before start_tracking
  for (const std::string& key : {it->second.space, std::string()}) s.spaces[key].live -= it->second.bytes;
  s.live.erase(it);
}

}  // namespace

void start_tracking() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.on = true;
    s.live.clear();
    s.spaces.clear();
  }
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_allocate_data_callback(on_allocate);
  tools::set_deallocate_data_callback(on_deallocate);
}

void stop_tracking() {
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_allocate_data_callback(nullptr);
  tools::set_deallocate_data_callback(nullptr);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.on = false;
}

bool tracking() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.on;
}

std::int64_t live_bytes(const std::string& space) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.spaces.find(space);
  return it == s.spaces.end() ? 0 : it->second.live;
}

std::int64_t peak_bytes(const std::string& space) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.spaces.find(space);
  return it == s.spaces.end() ? 0 : it->second.peak;
}

void reset_peak() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& [name, c] : s.spaces) c.peak = c.live;
}

std::vector<Allocation> live_allocations() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::map<std::uint64_t, Allocation> ordered;
  for (const auto& [ptr, a] : s.live) ordered[a.order] = Allocation{a.label, a.space, a.bytes};
  std::vector<Allocation> out;
  for (auto& [order, a] : ordered) out.push_back(std::move(a));
  return out;
}

std::string device_space_name() { return MemSpace::name(); }

std::int64_t peak_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return std::int64_t(usage.ru_maxrss) * 1024;  // Linux: kilobytes
}

std::int64_t rss_bytes() {
  std::int64_t rss = 0;
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) == 2)
      rss = std::int64_t(resident) * std::int64_t(::sysconf(_SC_PAGESIZE));
    std::fclose(f);
  }
  return rss;
}

}  // namespace gpipe::memory

#pragma once
// Internal: oneDNN's CPU engine and stream, and a cache of primitives with
// their memory objects keyed by shape, so a steady-state step creates no
// primitive and no memory object: a call looks its entry up, points the
// entry's memory objects at the caller's Views (set_data_handle, no copy;
// the layout is given by each memory descriptor's explicit strides) and
// executes. Not thread-safe beyond one mutex per cache lookup: gpipe calls
// the seam from one host thread per process.

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <new>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gpipe/core/views.hpp"

namespace gpipe::kernels::onednn::detail {

// oneDNN's threads (Debian's is built on OpenMP) follow the Kokkos
// execution space's concurrency unless OMP_NUM_THREADS is set: with Kokkos
// Serial, one thread, as every other kernel of the rank (otherwise each rank
// would start one OpenMP thread per core and oversubscribe the node). The
// OpenMP runtime is oneDNN's own dependency, so it is looked up at run time
// rather than linked (gpipe itself is not built with OpenMP).
inline void match_kokkos_threads() {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads")))
    set(int(ExecSpace::concurrency()));
}

inline dnnl::engine& engine() {
  static dnnl::engine e = [] {
    match_kokkos_threads();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}
inline dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

/// A memory object of descriptor `md` with no data yet (set per call).
inline dnnl::memory unbound(const dnnl::memory::desc& md) { return dnnl::memory(md, engine(), DNNL_MEMORY_NONE); }

/// A grow-only scratchpad of at least `bytes` for this thread's primitive
/// executions (one runs at a time per thread: Entry::run waits for it), so
/// a primitive in user scratchpad mode allocates nothing per execution.
/// Host memory (oneDNN runs on host memory only); freed at thread exit.
inline void* scratchpad(std::size_t bytes) {
  struct Buffer {
    std::size_t size = 0;
    void* data = nullptr;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer b;
  if (bytes > b.size) {
    std::free(b.data);
    const std::size_t size = (bytes + 4095) / 4096 * 4096;
    b.data = std::aligned_alloc(4096, size);
    if (b.data == nullptr) throw std::bad_alloc();
    b.size = size;
  }
  return b.data;
}

/// Attributes with the user scratchpad mode: the primitive takes its
/// scratchpad as the DNNL_ARG_SCRATCHPAD argument (Entry::use_scratchpad)
/// instead of allocating and freeing one in every execution (oneDNN's
/// batched matmul did: `_int_free` was 3.6 % of the ViT step, perf/README.md).
inline dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr = {}) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

/// A primitive with its memory objects (argument -> memory, handles set per call).
struct Entry {
  dnnl::primitive primitive;
  std::unordered_map<int, dnnl::memory> args;
  std::size_t scratchpad_bytes = 0;  // > 0: bound to scratchpad() per run
  /// For a primitive made with user_scratchpad(): its scratchpad argument.
  void use_scratchpad(const dnnl::memory::desc& md) {
    scratchpad_bytes = md.get_size();
    if (scratchpad_bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, unbound(md));
  }
  void run(std::initializer_list<std::pair<int, const void*>> handles) {
    for (const auto& [arg, ptr] : handles) args.at(arg).set_data_handle(const_cast<void*>(ptr));
    if (scratchpad_bytes > 0) args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratchpad(scratchpad_bytes));
    primitive.execute(stream(), args);
    stream().wait();
  }
};

/// Entries by key (shape, flags, kind); `make` builds a missing one.
class Cache {
 public:
  template <class Make>
  Entry& get(const std::vector<std::int64_t>& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(key, make()).first;
    return it->second;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::vector<std::int64_t>, Entry> entries_;
};


}  // namespace gpipe::kernels::onednn::detail

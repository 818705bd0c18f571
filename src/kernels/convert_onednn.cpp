// oneDNN conversions between fp32 and bf16 of the kernel seam (convert.hpp):
// a reorder of n contiguous values (its JIT kernel vectorizes with the
// CPU's widest ISA, AVX-512 BF16 where present), created once per (direction,
// n) and cached.
#include <algorithm>
#include <cstdlib>
#include <new>

#include "implementations.hpp"
#include "onednn_common.hpp"

namespace gpipe::kernels::onednn {

using dnnl::memory;
using namespace detail;

namespace {

Cache& cache() {
  static Cache c;
  return c;
}

memory::desc flat(std::int64_t n, memory::data_type t) { return memory::desc({n}, t, memory::format_tag::a); }

Entry& reorder(int direction, std::int64_t n, memory::data_type from, memory::data_type to) {
  return cache().get({direction, n}, [&] {
    Entry e;
    const dnnl::reorder::primitive_desc pd(engine(), flat(n, from), engine(), flat(n, to), user_scratchpad());
    e.primitive = dnnl::reorder(pd);
    e.args = {{DNNL_ARG_FROM, unbound(flat(n, from))}, {DNNL_ARG_TO, unbound(flat(n, to))}};
    e.use_scratchpad(pd.scratchpad_desc());
    return e;
  });
}

}  // namespace

void to_bf16(const ExecSpace& space, const float* src, std::int64_t n, bf16* dst) {
  if (n <= 0) return;
  Entry& e = reorder(0, n, memory::data_type::f32, memory::data_type::bf16);
  space.fence();
  e.run({{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
}

void from_bf16(const ExecSpace& space, const bf16* src, std::int64_t n, float* dst) {
  if (n <= 0) return;
  Entry& e = reorder(1, n, memory::data_type::bf16, memory::data_type::f32);
  space.fence();
  e.run({{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
}

void round_bf16(const ExecSpace& space, float* values, std::int64_t n) {
  // In chunks through a small host buffer of this thread (128 KiB, L2-sized,
  // outside the Kokkos memory spaces like oneDNN's scratchpad): a reorder
  // cannot write bf16 over the fp32 values it is reading.
  constexpr std::int64_t kChunk = 65536;
  struct Buffer {
    bf16* data = nullptr;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (buffer.data == nullptr) {
    buffer.data = static_cast<bf16*>(std::aligned_alloc(4096, kChunk * sizeof(bf16)));
    if (buffer.data == nullptr) throw std::bad_alloc();
  }
  for (std::int64_t begin = 0; begin < n; begin += kChunk) {
    const std::int64_t count = std::min(kChunk, n - begin);
    to_bf16(space, values + begin, count, buffer.data);
    from_bf16(space, buffer.data, count, values + begin);
  }
}

}  // namespace gpipe::kernels::onednn

// oneDNN conversions between fp32 and bf16 of the kernel seam (convert.hpp):
// a reorder of n contiguous values (its JIT kernel vectorizes with the
// CPU's widest ISA, AVX-512 BF16 where present), created once per (direction,
// n) and cached; and fp32 -> bf16 strided copies (permutations) of up to
// 6-D arrays, for the attention's operand layouts.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <vector>

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

// One reorder from `from` to `into`, with the seam's scratchpad.
Entry reorder_entry(const memory::desc& from, const memory::desc& into) {
  Entry e;
  const dnnl::reorder::primitive_desc pd(engine(), from, engine(), into, user_scratchpad());
  e.primitive = dnnl::reorder(pd);
  e.args = {{DNNL_ARG_FROM, unbound(from)}, {DNNL_ARG_TO, unbound(into)}};
  e.use_scratchpad(pd.scratchpad_desc());
  return e;
}

Entry& reorder(int direction, std::int64_t n, memory::data_type from, memory::data_type to) {
  return cache().get({direction, n}, [&] { return reorder_entry(flat(n, from), flat(n, to)); });
}

// fp32 -> bf16 over strided dims. Key: (2, rank, dims, source strides,
// destination strides); the flat reorders' keys start with 0 or 1.
Entry& strided_bf16(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& from_strides,
                    const std::vector<std::int64_t>& to_strides) {
  if (dims.empty() || dims.size() > 6 || from_strides.size() != dims.size() || to_strides.size() != dims.size())
    throw std::invalid_argument("gpipe::kernels::onednn::strided_to_bf16: rank 1-6 with one stride per dimension");
  std::vector<std::int64_t> key{2, std::int64_t(dims.size())};
  for (const auto* v : {&dims, &from_strides, &to_strides}) key.insert(key.end(), v->begin(), v->end());
  return cache().get(key, [&] {
    return reorder_entry(memory::desc(dims, memory::data_type::f32, from_strides),
                         memory::desc(dims, memory::data_type::bf16, to_strides));
  });
}

}  // namespace

void strided_to_bf16(const ExecSpace& space, const float* src, const std::vector<std::int64_t>& dims,
                     const std::vector<std::int64_t>& src_strides, bf16* dst,
                     const std::vector<std::int64_t>& dst_strides) {
  for (const std::int64_t d : dims)
    if (d <= 0) return;  // nothing to convert
  Entry& e = strided_bf16(dims, src_strides, dst_strides);
  space.fence();
  e.run({{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
}

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

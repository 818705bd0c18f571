// oneDNN element-wise activations (float) of the kernel seam (eltwise.hpp):
// eltwise forward (forward_training) and backward primitives over a 1-D
// array of n values, created once per (function, n) and cached.
#include "gpipe/kernels/eltwise.hpp"
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

dnnl::algorithm algorithm_of(Eltwise f) {
  switch (f) {
    case Eltwise::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
  }
  return dnnl::algorithm::eltwise_gelu_tanh;
}

memory::desc flat(std::int64_t n) { return memory::desc({n}, memory::data_type::f32, memory::format_tag::a); }

dnnl::eltwise_forward::primitive_desc forward_pd(Eltwise f, std::int64_t n) {
  return dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm_of(f), flat(n), 0.0f, 0.0f),
      user_scratchpad(), engine());
}

}  // namespace

void eltwise_forward(const ExecSpace& space, Eltwise f, const float* x, float* y, std::int64_t n) {
  Entry& e = cache().get({0, int(f), n}, [&] {
    Entry entry;
    const auto pd = forward_pd(f, n);
    entry.primitive = dnnl::eltwise_forward(pd);
    entry.args = {{DNNL_ARG_SRC, unbound(flat(n))}, {DNNL_ARG_DST, unbound(flat(n))}};
    entry.use_scratchpad(pd.scratchpad_desc());
    return entry;
  });
  space.fence();
  e.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}});
}

void eltwise_backward(const ExecSpace& space, Eltwise f, const float* x, const float* dy, float* dx, std::int64_t n) {
  Entry& e = cache().get({1, int(f), n}, [&] {
    Entry entry;
    const dnnl::eltwise_backward::primitive_desc pd(
        dnnl::eltwise_backward::desc(algorithm_of(f), flat(n), flat(n), 0.0f, 0.0f), user_scratchpad(), engine(),
        forward_pd(f, n));
    entry.primitive = dnnl::eltwise_backward(pd);
    entry.args = {{DNNL_ARG_SRC, unbound(flat(n))}, {DNNL_ARG_DIFF_DST, unbound(flat(n))},
                  {DNNL_ARG_DIFF_SRC, unbound(flat(n))}};
    entry.use_scratchpad(pd.scratchpad_desc());
    return entry;
  });
  space.fence();
  e.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}});
}

}  // namespace gpipe::kernels::onednn

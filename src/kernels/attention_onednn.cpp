// oneDNN attention implementation of the kernel seam (float): the shared
// attention_common.hpp with oneDNN's batched matmul (gemm_onednn.cpp) for
// the five GEMMs, one primitive over every (sample, head) per GEMM, and
// oneDNN's softmax forward / backward primitives (vectorized exp) over the
// (n*H*T, T) rows, in place. Causal: a Kokkos kernel first sets the masked
// scores to -inf, whose exp is exactly 0, so masked probabilities are 0 as
// in the portable path; their gradients are then 0 because P is. The
// softmax pair is also the attention's fp32 softmax under a reduced compute
// format (dispatch.cpp).
#include <limits>

#include "attention_common.hpp"
#include "onednn_common.hpp"

namespace gpipe::kernels::onednn {

namespace {

using dnnl::memory;
using namespace detail;

struct Batched {
  void operator()(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, float alpha,
                  const float* a, const Strided& sa, const float* b, const Strided& sb, float beta, float* c,
                  const Strided& sc) const {
    onednn::batched_gemm(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
  }
};

Cache& cache() {
  static Cache c;
  return c;
}

memory::desc rows_desc(std::int64_t rows, std::int64_t tokens) {
  return memory::desc({rows, tokens}, memory::data_type::f32, memory::dims{tokens, 1});
}

dnnl::softmax_forward::primitive_desc forward_pd(std::int64_t rows, std::int64_t tokens) {
  const dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_training, rows_desc(rows, tokens), 1);
  return dnnl::softmax_forward::primitive_desc(d, user_scratchpad(), engine());
}

// The masked scores (s > t, t = row % T) set to -inf before the softmax.
void mask(const ExecSpace& space, float* scores, std::int64_t rows, std::int64_t tokens) {
  const float minus_infinity = -std::numeric_limits<float>::infinity();
  Kokkos::parallel_for(
      "gpipe::kernels::attention::causal_mask", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
      KOKKOS_LAMBDA(const std::int64_t r) {
        float* p = scores + r * tokens;
        for (std::int64_t s = r % tokens + 1; s < tokens; ++s) p[s] = minus_infinity;
      });
}

struct Softmax {
  void forward(const ExecSpace& space, float* probs, std::int64_t rows, std::int64_t tokens, bool causal) const {
    softmax_forward(space, probs, rows, tokens, causal);
  }
  void backward(const ExecSpace& space, const float* probs, float* dprobs, std::int64_t rows, std::int64_t tokens,
                bool causal) const {
    softmax_backward(space, probs, dprobs, rows, tokens, causal);
  }
};

}  // namespace

void softmax_forward(const ExecSpace& space, float* probs, std::int64_t rows, std::int64_t tokens, bool causal) {
  if (causal) mask(space, probs, rows, tokens);
  space.fence();
  Entry& e = cache().get({0, rows, tokens}, [&] {
    Entry x;
    const auto pd = forward_pd(rows, tokens);
    x.primitive = dnnl::softmax_forward(pd);
    x.args = {{DNNL_ARG_SRC, unbound(rows_desc(rows, tokens))}, {DNNL_ARG_DST, unbound(rows_desc(rows, tokens))}};
    x.use_scratchpad(pd.scratchpad_desc());
    return x;
  });
  e.run({{DNNL_ARG_SRC, probs}, {DNNL_ARG_DST, probs}});
}

void softmax_backward(const ExecSpace& space, const float* probs, float* dprobs, std::int64_t rows,
                      std::int64_t tokens, bool) {
  space.fence();
  Entry& e = cache().get({1, rows, tokens}, [&] {
    const auto md = rows_desc(rows, tokens);
    const dnnl::softmax_backward::desc d(md, md, 1);
    Entry x;
    const dnnl::softmax_backward::primitive_desc pd(d, user_scratchpad(), engine(), forward_pd(rows, tokens));
    x.primitive = dnnl::softmax_backward(pd);
    x.args = {{DNNL_ARG_DST, unbound(md)}, {DNNL_ARG_DIFF_DST, unbound(md)}, {DNNL_ARG_DIFF_SRC, unbound(md)}};
    x.use_scratchpad(pd.scratchpad_desc());
    return x;
  });
  e.run({{DNNL_ARG_DST, probs}, {DNNL_ARG_DIFF_DST, dprobs}, {DNNL_ARG_DIFF_SRC, dprobs}});
}

void attention_forward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                       Matrix<float> probs, Matrix<float> out) {
  gpipe::kernels::detail::attention_forward<float>(space, shape, qkv, probs, out, Batched{}, Softmax{});
}

void attention_backward(const ExecSpace& space, const AttentionShape& shape, ConstMatrix<float> qkv,
                        ConstMatrix<float> probs, ConstMatrix<float> d_out, Matrix<float> work,
                        Matrix<float> d_qkv) {
  gpipe::kernels::detail::attention_backward<float>(space, shape, qkv, probs, d_out, work, d_qkv, Batched{},
                                                    Softmax{});
}

}  // namespace gpipe::kernels::onednn

// oneDNN convolution of the kernel seam (gpipe/kernels/conv.hpp), float:
// convolution forward (forward_training), backward-data and
// backward-weights primitives with the direct algorithm, on plain memory
// descriptors that match gpipe's layouts exactly (x and y nchw, w oihw,
// b x), so every argument is the caller's View itself (no reorder, no
// copy). One set of primitives per micro-batch size n, created on first use
// and cached in the layer's object (onednn_common.hpp's Cache), so a
// steady-state step creates none. Backward-weights writes dW and db; to add
// them (accumulate) it writes into the layer's gradient workspace and one
// Kokkos kernel adds that in.
//
// Padding: pad_h/pad_w on the left and on the right, as in the portable
// lowering; the output extent is then oneDNN's (H + 2 pad - K) / S + 1,
// the same floor, so trailing input rows no window reaches are skipped.
#include <map>
#include <vector>

#include "conv_common.hpp"
#include "onednn_common.hpp"

namespace gpipe::kernels::onednn {

using dnnl::memory;
using namespace detail;

namespace {

using dims = memory::dims;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

using Unmanaged = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Flat = Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// dw += tmp_w, db += tmp_b (db, tmp_b of extent 0: no bias).
void add_gradients(const ExecSpace& space, const Matrix<float>& dw, const Unmanaged& tmp_w, const Flat& db,
                   const Flat& tmp_b) {
  const std::int64_t taps = std::int64_t(dw.extent(1)), weights = std::int64_t(dw.extent(0)) * taps;
  const std::int64_t biases = std::int64_t(db.extent(0));
  Kokkos::parallel_for(
      "gpipe::Conv2d::add_gradients", Kokkos::RangePolicy<ExecSpace>(space, 0, weights + biases),
      KOKKOS_LAMBDA(const std::int64_t e) {
        if (e < weights)
          dw(e / taps, e % taps) += tmp_w(e / taps, e % taps);
        else
          db(e - weights) += tmp_b(e - weights);
      });
}

class Conv2dOneDnn final : public Conv2d<float>::Impl {
 public:
  explicit Conv2dOneDnn(const ConvShape& s) : s_(s) {}

  void reserve(std::int64_t n) override {
    // Primitives for n are made on first use (their creation is the
    // expensive part; a cell calls with its micro-batch sizes only).
    (void)n;
  }

  void forward(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstBias b, Matrix<float> y,
               Saved) override {
    space.fence();
    const bool bias = b.extent(0) > 0;
    Entry& e = entries(std::int64_t(x.extent(0)), bias).forward;
    if (bias)
      e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_BIAS, b.data()}, {DNNL_ARG_DST, y.data()}});
    else
      e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_DST, y.data()}});
  }

  void backward_data(const ExecSpace& space, ConstMatrix<float> dy, ConstMatrix<float> w,
                     Matrix<float> dx) override {
    space.fence();
    Entry& e = data_entry(std::int64_t(dy.extent(0)));
    e.run({{DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_DIFF_SRC, dx.data()}});
  }

  void backward_weights(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> dy, Saved,
                        Matrix<float> dw, Bias db, bool accumulate) override {
    space.fence();
    const bool bias = db.extent(0) > 0;
    Entry& e = entries(std::int64_t(x.extent(0)), bias).weights;
    float* w_out = dw.data();
    float* b_out = bias ? db.data() : nullptr;
    if (accumulate) {
      if (std::int64_t(tmp_w_.extent(0)) == 0) {
        tmp_w_ = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::weight_gradient"), s_.filters, s_.taps());
        tmp_b_ = Kokkos::View<float*, MemSpace>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::bias_gradient"), s_.filters);
      }
      w_out = tmp_w_.data();
      b_out = bias ? tmp_b_.data() : nullptr;
    }
    if (bias)
      e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_DIFF_WEIGHTS, w_out},
             {DNNL_ARG_DIFF_BIAS, b_out}});
    else
      e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_DIFF_WEIGHTS, w_out}});
    if (accumulate)
      add_gradients(space, dw, Unmanaged(tmp_w_.data(), s_.filters, s_.taps()), bias ? Flat(db.data(), s_.filters) : Flat(),
                    bias ? Flat(tmp_b_.data(), s_.filters) : Flat());
  }

  void backward(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> dy, ConstMatrix<float> w,
                Saved saved, Matrix<float> dw, Bias db, bool accumulate, Matrix<float> dx) override {
    backward_weights(space, x, dy, saved, dw, db, accumulate);
    if (dx.extent(0) > 0) backward_data(space, dy, w, dx);
  }

 private:
  struct Set {
    Entry forward, weights;
  };

  memory::desc src_md(std::int64_t n) const {
    return memory::desc({n, s_.channels, s_.height, s_.width}, f32, tag::nchw);
  }
  memory::desc weights_md() const {
    return memory::desc({s_.filters, s_.channels, s_.kernel_h, s_.kernel_w}, f32, tag::oihw);
  }
  memory::desc dst_md(std::int64_t n) const {
    return memory::desc({n, s_.filters, s_.out_h(), s_.out_w()}, f32, tag::nchw);
  }
  dims strides() const { return {s_.stride_h, s_.stride_w}; }
  dims padding() const { return {s_.pad_h, s_.pad_w}; }

  // The backward-data primitive for n samples (bias plays no part), made once.
  Entry& data_entry(std::int64_t n) {
    auto it = data_.find(n);
    if (it != data_.end()) return it->second;
    const auto src = src_md(n), wei = weights_md(), dst = dst_md(n);
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_forward::primitive_desc hint(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src, wei, dst, strides(),
                                        padding(), padding()),
        engine());
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algorithm, src, wei, dst, strides(), padding(), padding()), engine(),
        hint);
    Entry e;
    e.primitive = dnnl::convolution_backward_data(pd);
    e.args = {{DNNL_ARG_DIFF_SRC, unbound(src)}, {DNNL_ARG_WEIGHTS, unbound(wei)}, {DNNL_ARG_DIFF_DST, unbound(dst)}};
    count_conv2d_primitives(1);
    return data_.emplace(n, std::move(e)).first->second;
  }

  // The forward and backward-weights primitives for n samples (with or
  // without bias), made once.
  Set& entries(std::int64_t n, bool bias) {
    const std::vector<std::int64_t> key{n, bias ? 1 : 0};
    auto it = sets_.find(key);
    if (it != sets_.end()) return it->second;
    const auto src = src_md(n), wei = weights_md(), dst = dst_md(n);
    const memory::desc bia({s_.filters}, f32, tag::x);
    const dims strides = this->strides(), pad_l = padding(), pad_r = padding();
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const auto fd = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src, wei,
                                                           bia, dst, strides, pad_l, pad_r)
                         : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src, wei,
                                                           dst, strides, pad_l, pad_r);
    const dnnl::convolution_forward::primitive_desc fpd(fd, engine());
    Set set;
    set.forward.primitive = dnnl::convolution_forward(fpd);
    set.forward.args = {{DNNL_ARG_SRC, unbound(src)}, {DNNL_ARG_WEIGHTS, unbound(wei)}, {DNNL_ARG_DST, unbound(dst)}};
    if (bias) set.forward.args.emplace(DNNL_ARG_BIAS, unbound(bia));

    const auto wd = bias ? dnnl::convolution_backward_weights::desc(algorithm, src, wei, bia, dst, strides, pad_l,
                                                                     pad_r)
                         : dnnl::convolution_backward_weights::desc(algorithm, src, wei, dst, strides, pad_l, pad_r);
    const dnnl::convolution_backward_weights::primitive_desc wpd(wd, engine(), fpd);
    set.weights.primitive = dnnl::convolution_backward_weights(wpd);
    set.weights.args = {{DNNL_ARG_SRC, unbound(src)}, {DNNL_ARG_DIFF_DST, unbound(dst)},
                        {DNNL_ARG_DIFF_WEIGHTS, unbound(wei)}};
    if (bias) set.weights.args.emplace(DNNL_ARG_DIFF_BIAS, unbound(bia));
    count_conv2d_primitives(2);
    return sets_.emplace(key, std::move(set)).first->second;
  }

  ConvShape s_;
  std::map<std::vector<std::int64_t>, Set> sets_;  // by (n, bias)
  std::map<std::int64_t, Entry> data_;             // by n
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> tmp_w_;
  Kokkos::View<float*, MemSpace> tmp_b_;
};

}  // namespace

std::unique_ptr<Conv2d<float>::Impl> make_conv2d(const ConvShape& shape) {
  return std::make_unique<Conv2dOneDnn>(shape);
}

}  // namespace gpipe::kernels::onednn

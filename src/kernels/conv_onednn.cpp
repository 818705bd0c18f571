// oneDNN convolution of the kernel seam (gpipe/kernels/conv.hpp), float:
// convolution forward (forward_training), backward-data and
// backward-weights primitives with the direct algorithm, on the layouts
// oneDNN picks (format `any`: blocked, e.g. nChw16c / OIhw16i16o, for its
// AVX-512 direct kernels; with gpipe's plain nchw/oihw it falls back to its
// im2col + GEMM kernel, 2-3x slower at the CNN deck's shapes). gpipe's
// plain Views are reordered into the step's own buffers and back around
// each primitive (a copy each, small next to the convolution). One set of
// primitives and buffers per micro-batch size n, created on first use and
// kept in the layer's object, so a steady-state step creates none.
// Backward-weights writes dW and db; to add them (accumulate) it writes
// into the layer's gradient workspace and one Kokkos kernel adds that in.
//
// bf16 (compute format bf16, backend.hpp set_compute_format): the same
// primitives with bf16 multiplied operands (src, weights, diff_dst) and f32
// results (dst, diff_src, diff_weights, diff_bias) and f32 accumulation,
// oneDNN's avx512_core_bf16 kernels where the CPU has them: the reorders
// from gpipe's plain f32 Views into the primitive's blocked bf16 layouts
// convert (round to nearest even), so conv.cpp passes x, w and dy unrounded.
// Own primitives per (n, bias, bf16), so a step changing format makes new ones.
// Only where implementation(conv2d, 2) is oneDNN (backend.hpp,
// bf16_native_rule: AMX, or AMD with AVX-512 BF16): on an Intel CPU without
// AMX these bf16 kernels ran slower than the f32 ones on rounded operands.
//
// Padding: pad_h/pad_w on the left and on the right, as in the portable
// lowering; the output extent is then oneDNN's (H + 2 pad - K) / S + 1,
// the same floor, so trailing input rows no window reaches are skipped.
#include <map>
#include <optional>
#include <unordered_map>
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
constexpr auto bf16 = memory::data_type::bf16;

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

// One convolution primitive with the layouts oneDNN chose for it (format
// `any`: its blocked layouts, e.g. nChw16c, which its direct AVX-512 kernels
// need): each argument that gpipe passes in its plain layout and that the
// primitive wants in another is reordered into memory the step owns before
// (inputs) or out of it after (outputs) the primitive runs; the others are
// the caller's Views themselves. Everything is made once per step.
struct Step {
  struct Arg {
    memory user;                  // the caller's View (handle set per call)
    memory inner;                 // what the primitive reads or writes: user, or a buffer of the step
    std::optional<dnnl::reorder> reorder;  // user -> inner (inputs) or inner -> user (outputs)
    bool output = false;
  };
  dnnl::primitive primitive;
  std::map<int, Arg> args;
  std::unordered_map<int, memory> inner;  // the primitive's arguments (handles shared with args)

  void add(int arg, const memory::desc& user, const memory::desc& chosen, bool output) {
    Arg a;
    a.user = unbound(user);
    a.output = output;
    if (chosen == user) {
      a.inner = a.user;
    } else {
      a.inner = memory(chosen, engine());  // owned by the step
      a.reorder = output ? dnnl::reorder(a.inner, a.user) : dnnl::reorder(a.user, a.inner);
    }
    inner.emplace(arg, a.inner);
    args.emplace(arg, std::move(a));
  }

  void run(std::initializer_list<std::pair<int, const void*>> handles) {
    for (const auto& [arg, ptr] : handles) args.at(arg).user.set_data_handle(const_cast<void*>(ptr));
    auto& s = stream();
    for (auto& [arg, a] : args)
      if (a.reorder && !a.output) a.reorder->execute(s, a.user, a.inner);
    primitive.execute(s, inner);
    for (auto& [arg, a] : args)
      if (a.reorder && a.output) a.reorder->execute(s, a.inner, a.user);
    s.wait();
  }

  // The step's reordered copy of input `arg`, or null where the primitive
  // reads the caller's View itself.
  const memory* reordered(int arg) const {
    const auto it = args.find(arg);
    return it != args.end() && it->second.reorder && !it->second.output ? &it->second.inner : nullptr;
  }

  // run(), but input `arg` is read from `ready`, the same values already in
  // the primitive's layout (another step's reordered copy of the same View),
  // with no reorder of its own.
  void run_reusing(std::initializer_list<std::pair<int, const void*>> handles, int reused, const memory& ready) {
    for (const auto& [arg, ptr] : handles) args.at(arg).user.set_data_handle(const_cast<void*>(ptr));
    auto& s = stream();
    for (auto& [arg, a] : args)
      if (a.reorder && !a.output && arg != reused) a.reorder->execute(s, a.user, a.inner);
    std::unordered_map<int, memory> given = inner;
    given[reused] = ready;
    primitive.execute(s, given);
    for (auto& [arg, a] : args)
      if (a.reorder && a.output) a.reorder->execute(s, a.inner, a.user);
    s.wait();
  }
};

class Conv2dOneDnn final : public Conv2d<float>::Impl {
 public:
  explicit Conv2dOneDnn(const ConvShape& s) : s_(s) {}

  void reserve(std::int64_t n) override {
    // Primitives for n are made on first use (a cell calls with its
    // micro-batch sizes only).
    (void)n;
  }

  void forward(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> w, ConstBias b, Matrix<float> y,
               Saved) override {
    space.fence();
    const bool bias = b.extent(0) > 0;
    Step& e = steps(std::int64_t(x.extent(0)), bias, reduced_bf16()).forward;
    if (bias)
      e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_BIAS, b.data()}, {DNNL_ARG_DST, y.data()}});
    else
      e.run({{DNNL_ARG_SRC, x.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_DST, y.data()}});
  }

  void backward_data(const ExecSpace& space, ConstMatrix<float> dy, ConstMatrix<float> w,
                     Matrix<float> dx) override {
    space.fence();
    data_step(std::int64_t(dy.extent(0)), reduced_bf16())
        .run({{DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_DIFF_SRC, dx.data()}});
  }

  void backward_weights(const ExecSpace& space, ConstMatrix<float> x, ConstMatrix<float> dy, Saved,
                        Matrix<float> dw, Bias db, bool accumulate) override {
    space.fence();
    const bool bias = db.extent(0) > 0;
    Step& e = steps(std::int64_t(x.extent(0)), bias, reduced_bf16()).weights;
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
    if (dx.extent(0) == 0) return;
    // dy is reordered once: where backward-data wants it in the layout
    // backward-weights just reordered it into (e.g. nhwc bf16 on AMX), it
    // reads that copy (the same values; 1.5 ms of a bf16 CNN step at batch
    // 128 on the Intel Xeon with AMX, perf/README.md "Issue 22: the CNN's
    // bf16 step on AMX").
    const std::int64_t n = std::int64_t(dy.extent(0));
    const bool b16 = reduced_bf16();
    Step& data = data_step(n, b16);
    const memory* ready = steps(n, db.extent(0) > 0, b16).weights.reordered(DNNL_ARG_DIFF_DST);
    const memory* own = data.reordered(DNNL_ARG_DIFF_DST);
    if (ready != nullptr && own != nullptr && ready->get_desc() == own->get_desc())
      data.run_reusing({{DNNL_ARG_DIFF_DST, dy.data()}, {DNNL_ARG_WEIGHTS, w.data()}, {DNNL_ARG_DIFF_SRC, dx.data()}},
                       DNNL_ARG_DIFF_DST, *ready);
    else
      backward_data(space, dy, w, dx);
  }

 private:
  struct Set {
    Step forward, weights;
  };

  // The compute format is bf16 and oneDNN runs conv2d at bf16 (AMX, or an
  // AMD CPU with AVX-512 BF16: bf16_native_rule): bf16 operands. Else (the rounded route, conv.cpp)
  // the f32 primitives on operands already rounded.
  static bool reduced_bf16() {
    return compute_format() == Format::bf16 && implementation(Primitive::conv2d, 2) == Implementation::onednn;
  }
  memory::desc src_md(std::int64_t n, tag t = tag::nchw, memory::data_type d = f32) const {
    return memory::desc({n, s_.channels, s_.height, s_.width}, d, t);
  }
  memory::desc weights_md(tag t = tag::oihw, memory::data_type d = f32) const {
    return memory::desc({s_.filters, s_.channels, s_.kernel_h, s_.kernel_w}, d, t);
  }
  memory::desc dst_md(std::int64_t n, tag t = tag::nchw, memory::data_type d = f32) const {
    return memory::desc({n, s_.filters, s_.out_h(), s_.out_w()}, d, t);
  }
  dims strides() const { return {s_.stride_h, s_.stride_w}; }
  dims padding() const { return {s_.pad_h, s_.pad_w}; }

  dnnl::convolution_forward::primitive_desc forward_pd(std::int64_t n, bool bias, bool b16) const {
    const auto any = tag::any;
    const auto op = b16 ? bf16 : f32;  // the multiplied operands
    const memory::desc bia({s_.filters}, f32, tag::x);
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const auto kind = dnnl::prop_kind::forward_training;
    const auto d = bias ? dnnl::convolution_forward::desc(kind, algorithm, src_md(n, any, op), weights_md(any, op),
                                                          bia, dst_md(n, any), strides(), padding(), padding())
                        : dnnl::convolution_forward::desc(kind, algorithm, src_md(n, any, op), weights_md(any, op),
                                                          dst_md(n, any), strides(), padding(), padding());
    return dnnl::convolution_forward::primitive_desc(d, engine());
  }

  // The backward-data step for n samples (bias plays no part), made once.
  Step& data_step(std::int64_t n, bool b16) {
    const std::vector<std::int64_t> key{n, b16 ? 1 : 0};
    auto it = data_.find(key);
    if (it != data_.end()) return it->second;
    const auto any = tag::any;
    const auto op = b16 ? bf16 : f32;
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algorithm, src_md(n, any), weights_md(any, op), dst_md(n, any, op),
                                              strides(), padding(), padding()),
        engine(), forward_pd(n, false, b16));
    Step e;
    e.primitive = dnnl::convolution_backward_data(pd);
    e.add(DNNL_ARG_DIFF_DST, dst_md(n), pd.diff_dst_desc(), false);
    e.add(DNNL_ARG_WEIGHTS, weights_md(), pd.weights_desc(), false);
    e.add(DNNL_ARG_DIFF_SRC, src_md(n), pd.diff_src_desc(), true);
    count_conv2d_primitives(1);
    return data_.emplace(key, std::move(e)).first->second;
  }

  // The forward and backward-weights steps for n samples (with or without
  // bias), made once.
  Set& steps(std::int64_t n, bool bias, bool b16) {
    const std::vector<std::int64_t> key{n, bias ? 1 : 0, b16 ? 1 : 0};
    auto it = sets_.find(key);
    if (it != sets_.end()) return it->second;
    const auto any = tag::any;
    const auto op = b16 ? bf16 : f32;
    const memory::desc bia({s_.filters}, f32, tag::x);
    const auto fpd = forward_pd(n, bias, b16);
    Set set;
    set.forward.primitive = dnnl::convolution_forward(fpd);
    set.forward.add(DNNL_ARG_SRC, src_md(n), fpd.src_desc(), false);
    set.forward.add(DNNL_ARG_WEIGHTS, weights_md(), fpd.weights_desc(), false);
    if (bias) set.forward.add(DNNL_ARG_BIAS, bia, fpd.bias_desc(), false);
    set.forward.add(DNNL_ARG_DST, dst_md(n), fpd.dst_desc(), true);

    const auto algorithm = dnnl::algorithm::convolution_direct;
    const auto wd = bias ? dnnl::convolution_backward_weights::desc(algorithm, src_md(n, any, op), weights_md(any),
                                                                     bia, dst_md(n, any, op), strides(), padding(),
                                                                     padding())
                         : dnnl::convolution_backward_weights::desc(algorithm, src_md(n, any, op), weights_md(any),
                                                                     dst_md(n, any, op), strides(), padding(),
                                                                     padding());
    const dnnl::convolution_backward_weights::primitive_desc wpd(wd, engine(), fpd);
    set.weights.primitive = dnnl::convolution_backward_weights(wpd);
    set.weights.add(DNNL_ARG_SRC, src_md(n), wpd.src_desc(), false);
    set.weights.add(DNNL_ARG_DIFF_DST, dst_md(n), wpd.diff_dst_desc(), false);
    set.weights.add(DNNL_ARG_DIFF_WEIGHTS, weights_md(), wpd.diff_weights_desc(), true);
    if (bias) set.weights.add(DNNL_ARG_DIFF_BIAS, bia, wpd.diff_bias_desc(), true);
    count_conv2d_primitives(2);
    return sets_.emplace(key, std::move(set)).first->second;
  }

  ConvShape s_;
  std::map<std::vector<std::int64_t>, Set> sets_;   // by (n, bias, bf16)
  std::map<std::vector<std::int64_t>, Step> data_;  // by (n, bf16)
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> tmp_w_;
  Kokkos::View<float*, MemSpace> tmp_b_;
};

}  // namespace

std::unique_ptr<Conv2d<float>::Impl> make_conv2d(const ConvShape& shape) {
  return std::make_unique<Conv2dOneDnn>(shape);
}

}  // namespace gpipe::kernels::onednn

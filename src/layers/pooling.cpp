// Pooling over images [C, H, W] or signals [C, L] (no padding; windows that
// do not fit are dropped, as PyTorch and Keras 'valid' do):
//   {type: maxpool2d, size: S, stride: S}   output [C, OH, OW], OH = (H - S) / stride + 1
//   {type: avgpool2d, size: S, stride: S}   (stride defaults to size)
//   {type: maxpool1d | avgpool1d, size: S, stride: S}   input [C, L], output [C, OL]
//                                           (the 2-D layer with H = 1 and a 1 x S window)
//   {type: global_avgpool}                  output [C]: the mean over H x W
// maxpool2d saves, per output element, the feature index (c*H + h)*W + w of
// its maximum (the first in row-major window order) for backward: C*OH*OW
// values per sample (exact in float: the deck rejects images of 2^24 or
// more features). Its backward scatters each output gradient to that input;
// with overlapping windows (stride < size) one team per (sample, channel)
// adds its outputs in order. avgpool2d's backward gathers, per input, the
// windows that cover it in a fixed order. So results are bitwise
// reproducible on every backend, with no atomics.
// FLOPs: S^2 per output element forward and again backward (C*H*W for
// global_avgpool); backward is skipped for the model's first layer.

#include <fmt/format.h>

#include "gpipe/layers/layer.hpp"
#include "im2col.hpp"

namespace gpipe {

namespace {

struct PoolConfig : LayerConfig {
  std::int64_t size = 0, stride = 0;
};

// The window over [C, H, W], or over [C, L] as H = 1 with a 1 x S window.
detail::Window2d window(const PoolConfig& c, const Shape& in) {
  return detail::square_window(in, c.size, c.stride, 0);
}

template <class T, bool Max>
class Pool2d final : public Layer<T> {
 public:
  explicit Pool2d(const LayerShape& shape)
      : Layer<T>(shape), g_(window(shape.spec.as<PoolConfig>(), shape.input)) {}

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), C = g_.channels, H = g_.height, W = g_.width;
    const std::int64_t OH = g_.out_h(), OW = g_.out_w(), KH = g_.kernel_h, KW = g_.kernel_w;
    const std::int64_t SH = g_.stride_h, SW = g_.stride_w;
    // One output row (sample i, channel c, output row oh) per work item, its
    // OW outputs in a loop over raw pointers: the rank-2 MDRange over single
    // outputs cost about 8 ns an output on one host thread (10 % of a CNN
    // step; perf/README.md, "Issue 22: the CNN's bf16 step on AMX"). The
    // same comparisons in the same order, so the same maxima and arguments.
    const std::int64_t count = C * OH * OW;
    Kokkos::parallel_for(
        Max ? "gpipe::MaxPool2d::forward" : "gpipe::AvgPool2d::forward",
        Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, n * C * OH), KOKKOS_LAMBDA(const std::int64_t r) {
          const std::int64_t i = r / (C * OH), c = (r / OH) % C, oh = r % OH;
          const std::int64_t row = (c * H + oh * SH) * W, first = (c * OH + oh) * OW;
          const T* in = &x(i, 0);
          T* out = &y(i, first);
          if (Max) {
            T* arg = saved.data() + i * count + first;
            for (std::int64_t ow = 0; ow < OW; ++ow) {
              const std::int64_t base = row + ow * SW;
              T best = in[base];
              std::int64_t at = base;
              for (std::int64_t a = 0; a < KH; ++a)
                for (std::int64_t b = 0; b < KW; ++b) {
                  const T v = in[base + a * W + b];
                  if (v > best) {
                    best = v;
                    at = base + a * W + b;
                  }
                }
              out[ow] = best;
              arg[ow] = T(at);
            }
          } else {
            for (std::int64_t ow = 0; ow < OW; ++ow) {
              const std::int64_t base = row + ow * SW;
              T sum = T(0);
              for (std::int64_t a = 0; a < KH; ++a)
                for (std::int64_t b = 0; b < KW; ++b) sum += in[base + a * W + b];
              out[ow] = sum / T(KH * KW);
            }
          }
        });
  }

  void backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override {
    if (dx.extent(0) == 0) return;
    const std::int64_t n = std::int64_t(dx.extent(0)), C = g_.channels, H = g_.height, W = g_.width;
    const std::int64_t OH = g_.out_h(), OW = g_.out_w(), KH = g_.kernel_h, KW = g_.kernel_w;
    const std::int64_t SH = g_.stride_h, SW = g_.stride_w;
    if (Max) {
      const std::int64_t per = OH * OW;
      const bool disjoint = SH >= KH && SW >= KW;  // each input is the maximum of at most one window
      Kokkos::parallel_for(
          "gpipe::MaxPool2d::backward", RowPolicy(ctx.space, n * C, Kokkos::AUTO), KOKKOS_LAMBDA(const RowMember& team) {
            const std::int64_t i = team.league_rank() / C, c = team.league_rank() % C;
            T* out = &dx(i, c * H * W);
            const T* grad = &dy(i, c * per);
            const T* arg = &saved(i * C * per + c * per);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, H * W), [&](const std::int64_t e) { out[e] = T(0); });
            team.team_barrier();
            if (disjoint) {
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, per), [&](const std::int64_t o) {
                out[std::int64_t(arg[o]) - c * H * W] += grad[o];
              });
            } else {
              Kokkos::single(Kokkos::PerTeam(team), [&]() {
                for (std::int64_t o = 0; o < per; ++o) out[std::int64_t(arg[o]) - c * H * W] += grad[o];
              });
            }
          });
      return;
    }
    Kokkos::parallel_for(
        "gpipe::AvgPool2d::backward",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {n, C * H * W}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t e) {
          const std::int64_t c = e / (H * W), h = (e / W) % H, w = e % W;
          T sum = T(0);
          for (std::int64_t a = 0; a < KH; ++a) {
            const std::int64_t th = h - a;  // = oh * SH
            if (th < 0 || th % SH != 0 || th / SH >= OH) continue;
            for (std::int64_t b = 0; b < KW; ++b) {
              const std::int64_t tw = w - b;
              if (tw < 0 || tw % SW != 0 || tw / SW >= OW) continue;
              sum += dy(i, (c * OH + th / SH) * OW + tw / SW);
            }
          }
          dx(i, e) = sum / T(KH * KW);
        });
  }

  /// Max pooling with disjoint windows: y selects values of x, each dx is
  /// 0 + one value of dy, or 0.
  bool preserves_values() const override { return Max && g_.stride_h >= g_.kernel_h && g_.stride_w >= g_.kernel_w; }
  /// Backward reads dy and the saved argmax positions (max) or dy alone (average).
  bool reads_input_in_backward() const override { return false; }

 private:
  detail::Window2d g_;
};

template <class T>
using MaxPool2d = Pool2d<T, true>;
template <class T>
using AvgPool2d = Pool2d<T, false>;

template <class T>
class GlobalAvgPool final : public Layer<T> {
 public:
  explicit GlobalAvgPool(const LayerShape& shape) : Layer<T>(shape) {}

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) override {
    const std::int64_t n = std::int64_t(x.extent(0)), C = this->input_shape()[0];
    const std::int64_t HW = this->in_features() / C;
    Kokkos::parallel_for(
        "gpipe::GlobalAvgPool::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {n, C}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
          T sum = T(0);
          for (std::int64_t p = 0; p < HW; ++p) sum += x(i, c * HW + p);
          y(i, c) = sum / T(HW);
        });
  }

  void backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T>) override {
    if (dx.extent(0) == 0) return;
    const std::int64_t n = std::int64_t(dx.extent(0)), C = this->input_shape()[0];
    const std::int64_t HW = this->in_features() / C;
    Kokkos::parallel_for(
        "gpipe::GlobalAvgPool::backward",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(ctx.space, {0, 0}, {n, C * HW}),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t e) { dx(i, e) = dy(i, e / HW) / T(HW); });
  }
  bool reads_input_in_backward() const override { return false; }
};

Shape image_input(const Shape& in) {
  if (in.rank() != 3) throw ShapeMismatch("(channels, height, width)");
  return in;
}

// maxpool2d / avgpool2d (Rank 3 input) or maxpool1d / avgpool1d (Rank 2).
template <int Rank>
LayerEntry pool_entry(const char* name, bool max) {
  LayerEntry e;
  e.name = name;
  e.keys = {"size", "stride"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<PoolConfig>();
    c->size = k.required_integer("size", 1, "a positive integer");
    c->stride = k.integer("stride", c->size, 1, "a positive integer");
    return c;
  };
  e.output_shape = [](const LayerConfig& base, const Shape& in) {
    const auto& c = static_cast<const PoolConfig&>(base);
    if (Rank == 3) image_input(in);
    if (Rank == 2 && in.rank() != 2) throw ShapeMismatch("(channels, length)");
    if (in.size() >= (std::int64_t(1) << 24))
      throw ShapeMismatch("fewer than 2^24 features per sample (maximum positions are stored exactly in float)");
    const auto g = window(c, in);
    if (g.height < g.kernel_h || g.width < c.size)
      throw ShapeMismatch(fmt::format("{} of at least {} for size {}",
                                      Rank == 3 ? "height and width" : "length", c.size, c.size));
    return Rank == 3 ? Shape{in[0], g.out_h(), g.out_w()} : Shape{in[0], g.out_w()};
  };
  if (max)
    e.saved = [](const LayerConfig& base, const Shape& in) {
      return SavedSize{window(static_cast<const PoolConfig&>(base), in).pixels() * in[0], 0};
    };
  e.flops = [](const LayerConfig& base, const Shape& in, const Shape& out, std::int64_t batch,
               bool input_gradient) {
    const auto& c = static_cast<const PoolConfig&>(base);
    const auto g = window(c, in);
    return (input_gradient ? 2.0 : 1.0) * double(batch) * double(out.size()) *
           double(g.kernel_h * g.kernel_w);
  };
  return max ? with_factories<MaxPool2d>(e) : with_factories<AvgPool2d>(e);
}

LayerEntry global_avgpool_entry() {
  LayerEntry e;
  e.name = "global_avgpool";
  e.output_shape = [](const LayerConfig&, const Shape& in) { return Shape{image_input(in)[0]}; };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    return (input_gradient ? 2.0 : 1.0) * double(batch) * double(in.size());
  };
  return with_factories<GlobalAvgPool>(e);
}

}  // namespace

GPIPE_LAYER_ENTRIES(pooling) {
  return {pool_entry<3>("maxpool2d", true), pool_entry<3>("avgpool2d", false),
          pool_entry<2>("maxpool1d", true), pool_entry<2>("avgpool1d", false), global_avgpool_entry()};
}

}  // namespace gpipe

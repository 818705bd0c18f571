#include "gpipe/layers/dropout.hpp"
#include "gpipe/core/precision.hpp"

#include "gpipe/core/rng.hpp"

namespace gpipe {

template <class T>
Dropout<T>::Dropout(const LayerShape& shape)
    : Layer<T>(shape), rate_(shape.spec.as<DropoutConfig>().rate) {}

namespace {
// y = x * mask * scale, where mask keys on (seed, step, layer, sample, column).
template <class T>
void apply_mask(const PassContext& ctx, std::int64_t layer, double rate, ConstMatrix<T> in,
                Matrix<T> out, const char* label) {
  const std::int64_t n = std::int64_t(in.extent(0)), f = std::int64_t(in.extent(1));
  const std::uint64_t key = rng::hash(ctx.seed, rng::kDropout, ctx.step, std::uint64_t(layer));
  const std::int64_t offset = ctx.sample_offset;
  const T scale = T(1.0 / (1.0 - rate));
  Kokkos::parallel_for(
      label, RowPolicy(ctx.space, n, Kokkos::AUTO), KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t i = team.league_rank();
        // One key per sample, then one SplitMix64 step per column.
        const std::uint64_t row = rng::mix64(key ^ rng::mix64(std::uint64_t(offset + i)));
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, f), [&](const std::int64_t j) {
          const double u = rng::uniform01(rng::mix64(row + std::uint64_t(j)));
          out(i, j) = u >= rate ? in(i, j) * scale : T(0);
        });
      });
}
}  // namespace

template <class T>
void Dropout<T>::forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T>) {
  if (!ctx.training || rate_ == 0.0) {
    Kokkos::deep_copy(ctx.space, y, x);
    return;
  }
  apply_mask<T>(ctx, this->index(), rate_, x, y, "gpipe::Dropout::forward");
}

template <class T>
void Dropout<T>::backward(const PassContext& ctx, ConstMatrix<T>, ConstMatrix<T> dy,
                          Matrix<T> dx, SavedView<T>) {
  if (dx.extent(0) == 0) return;
  if (rate_ == 0.0) {
    Kokkos::deep_copy(ctx.space, dx, dy);
    return;
  }
  apply_mask<T>(ctx, this->index(), rate_, dy, dx, "gpipe::Dropout::backward");
}

#define GPIPE_INSTANTIATE(T) template class Dropout<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

namespace {
LayerEntry dropout_entry() {
  LayerEntry e;
  e.name = "dropout";
  e.keys = {"rate"};
  e.parse = [](const LayerKeys& k) -> std::shared_ptr<const LayerConfig> {
    auto c = std::make_shared<DropoutConfig>();
    c->rate = k.number("rate", 0.0, 0.0, 1.0, true, "a number in [0, 1)");
    return c;
  };
  e.output_shape = [](const LayerConfig&, const Shape& in) { return in; };
  e.flops = [](const LayerConfig&, const Shape& in, const Shape&, std::int64_t batch,
               bool input_gradient) {
    return (input_gradient ? 2.0 : 1.0) * double(batch) * double(in.size());
  };
  return with_factories<Dropout>(e);
}
}  // namespace

GPIPE_LAYER_ENTRIES(dropout) { return {dropout_entry()}; }

}  // namespace gpipe

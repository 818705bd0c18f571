#include "gpipe/model/cost.hpp"
#include "gpipe/core/precision.hpp"

#include <chrono>

#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe {

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// One layer with its parameters and (batch, features) buffers, for timing.
template <class T>
struct LayerBench {
  std::unique_ptr<Layer<T>> layer;
  Vector<T> p, g, state;
  Matrix<T> x, y, dx;
  Vector<T> saved_storage;
  SavedView<T> saved;
  const PassContext ctx{};  // the default execution-space instance, fenced around the timing

  LayerBench(const ModelSpec& model, std::int64_t index, std::int64_t batch) : layer(make_layer<T>(model, index)) {
    p = Vector<T>("gpipe::profile::parameters", layer->parameter_count());
    g = Vector<T>("gpipe::profile::gradients", layer->parameter_count());
    state = Vector<T>("gpipe::profile::state", layer->state_count());
    layer->bind(p.data(), g.data());
    layer->bind_state(state.data());
    layer->initialize(0);
    x = Matrix<T>("gpipe::profile::x", batch, layer->in_features());
    y = Matrix<T>("gpipe::profile::y", batch, layer->out_features());
    // The model's first layer never computes an input gradient (see Cell::backward).
    dx = Matrix<T>("gpipe::profile::dx", index == 0 ? 0 : batch, layer->in_features());
    saved_storage = Vector<T>("gpipe::profile::saved", size_t(layer->saved_size().elements(batch)));
    saved = SavedView<T>(saved_storage.data(), saved_storage.extent(0));
    Kokkos::deep_copy(ctx.space, x, T(0.5));
    Kokkos::deep_copy(ctx.space, y, T(0.25));
  }
  // Mean seconds of `f` over 3 repetitions after one warm-up, fenced.
  template <class F>
  double mean_seconds(F&& f) {
    f();
    compat::fence(ctx.space, "gpipe::profile");
    const int reps = 3;
    const double start = now();
    for (int r = 0; r < reps; ++r) f();
    compat::fence(ctx.space, "gpipe::profile");
    return (now() - start) / reps;
  }
};

template <class T>
double time_layer(const ModelSpec& model, std::int64_t index, std::int64_t batch) {
  LayerBench<T> b(model, index, batch);
  return b.mean_seconds([&] {
    b.layer->forward(b.ctx, b.x, b.y, b.saved);
    b.layer->backward(b.ctx, b.x, b.y, b.dx, b.saved);
  });
}

template <class T>
LayerSeconds time_layer_parts(const ModelSpec& model, std::int64_t index, std::int64_t batch) {
  LayerBench<T> b(model, index, batch);
  LayerSeconds s;
  s.forward = b.mean_seconds([&] { b.layer->forward(b.ctx, b.x, b.y, b.saved); });
  if (b.layer->splits_backward()) {
    s.backward_input = b.mean_seconds([&] { b.layer->backward_input(b.ctx, b.x, b.y, b.dx, b.saved); });
    s.backward_weights = b.mean_seconds([&] { b.layer->backward_weights(b.ctx, b.x, b.y, b.saved); });
  } else {
    s.backward_input = b.mean_seconds([&] { b.layer->backward(b.ctx, b.x, b.y, b.dx, b.saved); });
  }
  return s;
}

template <class T>
std::vector<double> layer_costs(const ModelSpec& model, const std::string& mode,
                                std::int64_t micro_batch, MPI_Comm comm) {
  const auto L = std::int64_t(model.layers.size());
  std::vector<double> costs(size_t(L), 0.0);
  if (mode == "time") {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0)
      for (std::int64_t l = 0; l < L; ++l) costs[size_t(l)] = time_layer<T>(model, l, micro_batch);
    MPI_Bcast(costs.data(), int(L), MPI_DOUBLE, 0, comm);
    return costs;
  }
  const auto shapes = model_shapes(model);
  for (std::int64_t l = 0; l < L; ++l) {
    const auto& layer = shapes[size_t(l)];
    costs[size_t(l)] = mode == "params" ? double(layer.parameter_count()) : layer.flops(micro_batch, l > 0);
  }
  return costs;
}

#define GPIPE_INSTANTIATE(T) \
  template double time_layer<T>(const ModelSpec&, std::int64_t, std::int64_t); \
  template LayerSeconds time_layer_parts<T>(const ModelSpec&, std::int64_t, std::int64_t); \
  template std::vector<double> layer_costs<T>(const ModelSpec&, const std::string&, std::int64_t, MPI_Comm);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

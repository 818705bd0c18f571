#include "gpipe/pipeline/cell.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpipe/core/error.hpp"

namespace gpipe {

std::int64_t cell_activation_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                   int cell, const CellOptions& options, std::int64_t scalar_bytes) {
  const int M = options.micro_batches, K = partition.cells();
  const int first = partition.first_layer(cell), count = partition.counts.at(size_t(cell));
  const std::int64_t rows = (options.max_batch + M - 1) / M;
  const auto layer = [&](int l) -> const LayerShape& { return shapes.at(size_t(first + l)); };
  const auto bytes = [&](std::int64_t r, std::int64_t c) { return r * c * scalar_bytes; };
  const auto saved = [&](int l) { return layer(l).saved.elements(rows) * scalar_bytes; };
  const bool last = cell == K - 1;
  const std::int64_t in = layer(0).input.size(), out = layer(count - 1).output.size();
  // Slot sizes (the gradient buffers are allocated from the same plan but
  // not counted).
  SlotBytes slot;
  slot.micro_batch = bytes(rows, in) + (last ? 0 : bytes(rows, out)) + saved(count - 1);
  for (int l = 0; l + 1 < count; ++l) slot.activations += bytes(rows, layer(l).output.size()) + saved(l);
  slot.fixed = last ? bytes(rows, out) : 0;
  // zero_bubble keeps the output gradient of every split layer (registry
  // entry splits_backward, as Layer::splits_backward) from its B op to its W op.
  for (int l = 0; l + 1 < count; ++l)
    if (layer(l).entry && layer(l).entry->splits_backward) slot.weight_grad += bytes(rows, layer(l).output.size());
  const Schedule schedule = make_schedule(options.schedule, K, M, options.remat);
  return planned_bytes(plan_buffers(schedule, cell), slot) + batch_weight_bytes(shapes, partition, cell, options, scalar_bytes);
}

bool uses_batch_weights(const CellOptions& options) {
  return options.schedule == ScheduleKind::FillDrain && options.micro_batches > 1;
}

std::int64_t batch_weight_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                int cell, const CellOptions& options, std::int64_t scalar_bytes) {
  if (!uses_batch_weights(options)) return 0;
  const int first = partition.first_layer(cell), count = partition.counts.at(size_t(cell));
  std::int64_t outputs = 0, inputs = 0, widest = 0;
  for (int l = first; l < first + count; ++l) {
    const LayerShape& s = shapes.at(size_t(l));
    if (!s.entry || !s.entry->whole_batch_weights) continue;
    outputs += s.output.size();
    if (cell == 0 && l == 0) continue;  // reads the mini-batch itself
    inputs += s.input.size();
    widest = std::max(widest, s.input.size());
  }
  // Without re-materialization the inputs are stacked at W from the kept
  // activations into one shared buffer; with it each layer keeps its own.
  return options.max_batch * (outputs + (options.remat == Remat::Never ? widest : inputs)) * scalar_bytes;
}

template <class T>
Cell<T>::Cell(const ModelSpec& model, const Partition& partition, MPI_Comm comm,
              const CellOptions& options)
    : comm_(comm), options_(options), to_next_(options.link), to_prev_(options.link) {
  require(partition.cells() == comm_.size(),
          fmt::format("pipeline: the partition has {} cells but the communicator has {} ranks",
                      partition.cells(), comm_.size()));
  require(options.max_batch >= options.micro_batches,
          fmt::format("training.micro_batches: {} micro-batches cannot split a batch of {} samples",
                      options.micro_batches, options.max_batch));
  const int M = options.micro_batches;
  first_layer_ = partition.first_layer(rank());
  const int count = partition.counts[size_t(rank())];

  // Layers and their parameters, as views into one flat buffer per cell.
  const auto shapes = model_shapes(model);
  std::int64_t total = 0, total_state = 0;
  for (int i = 0; i < count; ++i) {
    layers_.push_back(make_layer<T>(shapes.at(size_t(first_layer_ + i))));
    total += layers_.back()->parameter_count();
    total_state += layers_.back()->state_count();
  }
  params_ = Vector<T>("gpipe::Cell::parameters", total);
  grads_ = Vector<T>("gpipe::Cell::gradients", total);
  state_ = Vector<T>("gpipe::Cell::state", total_state);
  std::int64_t offset = 0, state_offset = 0;
  for (auto& layer : layers_) {
    layer->bind(params_.data() + offset, grads_.data() + offset);
    layer->bind_state(state_.data() + state_offset);
    layer->initialize(options.seed);
    offset += layer->parameter_count();
    state_offset += layer->state_count();
  }

  // Activation and boundary buffers, each sized for the largest micro-batch.
  capacity_ = (options.max_batch + M - 1) / M;
  for (auto& layer : layers_) layer->reserve(capacity_);
  in_features_ = layers_.front()->in_features();
  out_features_ = layers_.back()->out_features();
  const auto rows = capacity_;
  std::int64_t max_features = in_features_;
  for (auto& layer : layers_) max_features = std::max(max_features, layer->out_features());

  train_schedule_ = make_schedule(options.schedule, cells(), M, options.remat);
  train_plan_ = plan_buffers(train_schedule_, rank());
  for (const Op& op : train_schedule_.ops[size_t(rank())]) {
    if (op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput) last_backward_ = op.micro_batch;
    if (op.kind == OpKind::BackwardWeights) last_weights_ = op.micro_batch;
  }
  for (auto& layer : layers_) splits_.push_back(layer->splits_backward());
  const CellBufferPlan& plan = train_plan_;
  const auto uninitialized = [](const std::string& name) {
    return Kokkos::view_alloc(Kokkos::WithoutInitializing, name);
  };
  const auto saved_elements = [&](int l) { return layers_[size_t(l)]->saved_size().elements(rows); };
  const auto saved_buffer = [&](int l, const std::string& name) {
    const auto elements = saved_elements(l);
    return elements == 0 ? Vector<T>() : Vector<T>(uninitialized(name), elements);
  };
  activation_bytes_ = cell_activation_bytes(shapes, partition, rank(), options, std::int64_t(sizeof(T)));
  // The whole-batch W's buffers (batch_weight_bytes counts the same).
  const bool shared_x = options.remat == Remat::Never;
  std::int64_t widest = 0;
  for (int l = 0; l < count; ++l) {
    const auto& layer = *layers_[size_t(l)];
    batch_w_.push_back(uses_batch_weights(options) && splits_[size_t(l)] && layer.whole_batch_weights());
    const auto make = [&](const char* what, std::int64_t cols) {
      return batch_w_.back() ? Matrix<T>(uninitialized(fmt::format("gpipe::Cell::{}[{}]", what, l)),
                                         options.max_batch, cols)
                             : Matrix<T>();
    };
    batch_dy_.push_back(make("batch_dy", layer.out_features()));
    const bool own_input = !(l == 0 && is_first());  // else it reads the mini-batch itself
    batch_x_.push_back(shared_x || !own_input ? Matrix<T>() : make("batch_x", layer.in_features()));
    if (batch_w_.back() && own_input) widest = std::max(widest, layer.in_features());
  }
  if (shared_x && widest > 0) {
    batch_x_shared_ = Vector<T>(uninitialized("gpipe::Cell::batch_x"), options.max_batch * widest);
    for (int l = is_first() ? 1 : 0; l < count; ++l)
      if (batch_w_[size_t(l)])
        batch_x_[size_t(l)] = Matrix<T>(batch_x_shared_.data(), options.max_batch, layers_[size_t(l)]->in_features());
  }

  for (int s = 0; s < plan.micro_batch.slots; ++s) {
    if (!is_first())
      inputs_.emplace_back(fmt::format("gpipe::Cell::input[{}]", s), rows, in_features_, options_.space);
    if (!is_last()) {
      outputs_.emplace_back(fmt::format("gpipe::Cell::output[{}]", s), rows, out_features_, options_.space);
      output_grads_.emplace_back(fmt::format("gpipe::Cell::output_grad[{}]", s), rows, out_features_, options_.space);
    } else {
      logit_grads_.emplace_back(uninitialized(fmt::format("gpipe::Cell::logit_grad[{}]", s)), rows,
                                out_features_);
    }
    saved_last_.push_back(saved_buffer(count - 1, fmt::format("gpipe::Cell::saved_last[{}]", s)));
  }
  if (!is_first())
    for (int s = 0; s < plan.input_grad.slots; ++s)
      input_grads_.emplace_back(fmt::format("gpipe::Cell::input_grad[{}]", s), rows, in_features_, options_.space);
  if (is_last()) logits_ = Matrix<T>(uninitialized("gpipe::Cell::logits"), rows, out_features_);
  if (is_last()) {
    loss_ = make_loss<T>(model.loss);
    loss_->set_execution_space(options_.space);
    loss_->reserve(rows, out_features_);  // the first step allocates nothing either
  }
  weight_grads_.resize(size_t(plan.weight_grad.slots));
  for (int s = 0; s < plan.weight_grad.slots; ++s)
    for (int l = 0; l + 1 < count; ++l)
      weight_grads_[size_t(s)].push_back(
          splits_[size_t(l)]
              ? Matrix<T>(uninitialized(fmt::format("gpipe::Cell::weight_grad[{}][{}]", s, l)), rows,
                          layers_[size_t(l)]->out_features())
              : Matrix<T>());
  kept_.resize(size_t(plan.activations.slots));
  saved_.resize(size_t(plan.activations.slots));
  for (int s = 0; s < plan.activations.slots; ++s) {
    for (int l = 0; l + 1 < count; ++l) {
      kept_[size_t(s)].emplace_back(uninitialized(fmt::format("gpipe::Cell::activation[{}][{}]", s, l)),
                                    rows, layers_[size_t(l)]->out_features());
      saved_[size_t(s)].push_back(saved_buffer(l, fmt::format("gpipe::Cell::saved[{}][{}]", s, l)));
    }
  }
  grad_ping_ = Vector<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Cell::grad_ping"),
                         rows * max_features);
  grad_pong_ = Vector<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Cell::grad_pong"),
                         rows * max_features);
}

template <class T>
std::vector<std::int64_t> Cell<T>::parameter_offsets() const {
  std::vector<std::int64_t> out{0};
  for (const auto& layer : layers_) out.push_back(out.back() + layer->parameter_count());
  return out;
}

template <class T>
Vector<T> Cell<T>::gradients() const {
  if (zero_pending_) {
    Kokkos::deep_copy(options_.space, grads_, T(0));
    zero_pending_ = false;
  }
  return grads_;
}

template <class T>
void Cell<T>::begin_gradients() {
  writes_.assign(layers_.size(), false);
  if (!zero_pending_) return;
  zero_pending_ = false;
  std::int64_t offset = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::int64_t count = layers_[l]->parameter_count();
    if (layers_[l]->writes_gradients()) writes_[l] = true;
    else if (count > 0)
      Kokkos::deep_copy(options_.space, Kokkos::subview(grads_, std::make_pair(offset, offset + count)), T(0));
    offset += count;
  }
}

template <class T>
PassContext Cell<T>::gradient_context(PassContext ctx, int l) {
  ctx.accumulate_gradients = !writes_[size_t(l)];
  writes_[size_t(l)] = false;
  return ctx;
}

template <class T>
ConstMatrix<T> Cell<T>::layer_input(int m, int layer) const {
  const auto& mb = split_[size_t(m)];
  if (layer > 0) return layer_output(m, layer - 1);
  if (!is_first()) return inputs_[size_t(plan_->micro_batch.slot[size_t(m)])].rows(mb.size);
  return Kokkos::subview(batch_inputs_, std::make_pair(mb.offset, mb.offset + mb.size), Kokkos::ALL);
}

template <class T>
Matrix<T> Cell<T>::layer_output(int m, int layer) const {
  const auto n = split_[size_t(m)].size;
  if (layer + 1 == int(layers_.size())) {
    return is_last() ? Matrix<T>(logits_.data(), n, out_features_)
                     : outputs_[size_t(plan_->micro_batch.slot[size_t(m)])].rows(n);
  }
  const Matrix<T>& storage = kept_[size_t(activation_slot_[size_t(m)])][size_t(layer)];
  return Matrix<T>(storage.data(), n, storage.extent(1));
}

template <class T>
SavedView<T> Cell<T>::layer_saved(int m, int layer) const {
  const Vector<T>& storage =
      layer + 1 == int(layers_.size())
          ? saved_last_[size_t(plan_->micro_batch.slot[size_t(m)])]
          : saved_[size_t(activation_slot_[size_t(m)])][size_t(layer)];
  return SavedView<T>(storage.data(), storage.extent(0));
}

template <class T>
void Cell<T>::post_receives(int m, bool training) {
  const auto rows = split_[size_t(m)].size;
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  const std::int64_t bytes = rows * std::int64_t(sizeof(T)) *
      ((is_first() ? 0 : in_features_) + (training && !is_last() ? out_features_ : 0));
  if (bytes == 0) return;
  const Tracer::Scope receive(tracer_, EventKind::Receive, m, bytes);
  if (!is_first())
    inputs_[slot].post_recv(comm(), rank() - 1, forward_tag(m), rows, "forward activation", m,
                            options_.link.enabled());
  if (training && !is_last())
    output_grads_[slot].post_recv(comm(), rank() + 1, backward_tag(m), rows, "gradient", m,
                                  options_.link.enabled());
}

template <class T>
void Cell<T>::deliver(const BoundaryBuffer<T>& received, int m) {
  const WireTime& w = received.wire_time();
  if (w.bytes == 0) return;
  if (tracer_) tracer_->record_ns(EventKind::Wire, m, w.sent_ns, w.arrival_ns, w.bytes);
  if (link_clock_ns() >= w.arrival_ns) return;  // the wire time was hidden
  const Tracer::Scope hold(tracer_, EventKind::LinkWait, m);
  hold_until(w.arrival_ns);
}

template <class T>
void Cell<T>::forward(int m, bool whole_cell, bool training, LossSums& sums) {
  const PassContext ctx{options_.seed, step_, placement_.offset + split_[size_t(m)].offset, training,
                        !whole_cell, options_.space};
  const auto& mb = split_[size_t(m)];
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  activation_slot_[size_t(m)] =
      whole_cell ? plan_->forward_slot[size_t(m)] : plan_->activations.slot[size_t(m)];
  if (!is_first() && whole_cell) {
    {
      const Tracer::Scope wait(tracer_, EventKind::Wait, m);
      inputs_[slot].wait();
    }
    deliver(inputs_[slot], m);
  }
  if (!is_last() && whole_cell && outputs_[slot].pending()) {  // the slot's previous send
    const Tracer::Scope wait(tracer_, EventKind::Wait, m);
    outputs_[slot].wait();
  }
  {
    const Tracer::Scope compute(tracer_, whole_cell ? EventKind::Forward : EventKind::Recompute, m);
    const int count = whole_cell ? int(layers_.size()) : int(layers_.size()) - 1;
    for (int l = 0; l < count; ++l)
      layers_[size_t(l)]->forward(ctx, layer_input(m, l), layer_output(m, l), layer_saved(m, l));
    if (!whole_cell) return;  // a recompute stops before the cell output
    if (is_last() && predict_logits_.extent(0) > 0) {
      Kokkos::deep_copy(options_.space, Kokkos::subview(predict_logits_, std::make_pair(mb.offset, mb.offset + mb.size),
                                        Kokkos::ALL),
                        layer_output(m, int(layers_.size()) - 1));
      return;
    }
    if (is_last()) {
      const Targets<T> targets = batch_targets_.rows(mb.offset, mb.size);
      const Matrix<T> dlogits =
          training ? Matrix<T>(logit_grads_[slot].data(), mb.size, out_features_) : Matrix<T>();
      const std::int64_t N = placement_.global_size > 0 ? placement_.global_size : batch_size_;
      loss_->accumulate(layer_output(m, int(layers_.size()) - 1), targets, T(1.0 / double(N)), dlogits);
      return;
    }
  }
  const Tracer::Scope send(tracer_, EventKind::Send, m, mb.size * out_features_ * std::int64_t(sizeof(T)));
  outputs_[slot].post_send(comm(), rank() + 1, forward_tag(m), mb.size,
                           options_.link.enabled() ? &to_next_ : nullptr);
}

template <class T>
void Cell<T>::gradient_final(int layer) {
  if (!training_ || !gradient_ready_) return;
  final_[size_t(layer)] = true;
  while (announced_ > 0 && final_[size_t(announced_ - 1)]) gradient_ready_(--announced_);
}

template <class T>
void Cell<T>::backward(int m, bool split) {
  const PassContext ctx{options_.seed, step_, placement_.offset + split_[size_t(m)].offset, true, false,
                        options_.space};
  const bool final_gradients = training_ && m == last_backward_;
  const auto n = split_[size_t(m)].size;
  const auto offset = split_[size_t(m)].offset;
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  activation_slot_[size_t(m)] = plan_->activations.slot[size_t(m)];
  ConstMatrix<T> dy;
  if (is_last()) {
    dy = Matrix<T>(logit_grads_[slot].data(), n, out_features_);
  } else {
    {
      const Tracer::Scope wait(tracer_, EventKind::Wait, m);
      output_grads_[slot].wait();
    }
    deliver(output_grads_[slot], m);
    dy = output_grads_[slot].rows(n);
  }
  BoundaryBuffer<T>* input_grad =
      is_first() ? nullptr : &input_grads_[size_t(plan_->input_grad.slot[size_t(m)])];
  if (input_grad && input_grad->pending()) {  // the slot's previous send (its receive is posted)
    const Tracer::Scope wait(tracer_, EventKind::Wait, m);
    input_grad->wait();
  }
  {
    const Tracer::Scope compute(tracer_, split ? EventKind::BackwardInput : EventKind::Backward, m);
    const int count = int(layers_.size());
    for (int l = count - 1; l >= 0; --l) {
      Matrix<T> dx;
      if (l > 0 && split && splits_[size_t(l - 1)]) {  // layer l-1's dL/dy, kept for its W op
        const Matrix<T>& kept = weight_grads_[size_t(plan_->weight_grad.slot[size_t(m)])][size_t(l - 1)];
        dx = Matrix<T>(kept.data(), n, kept.extent(1));
      } else if (l > 0 && batch_w_[size_t(l - 1)]) {  // layer l-1's dL/dy, stacked for the whole-batch W
        const Matrix<T>& stacked = batch_dy_[size_t(l - 1)];
        dx = Matrix<T>(stacked.data() + offset * std::int64_t(stacked.extent(1)), n, stacked.extent(1));
      } else if (l > 0) {
        T* buffer = (count - 1 - l) % 2 == 0 ? grad_ping_.data() : grad_pong_.data();
        dx = Matrix<T>(buffer, n, layers_[size_t(l)]->in_features());
      } else if (!is_first()) {
        dx = input_grad->rows(n);
      }
      if (split) {
        const PassContext c = splits_[size_t(l)] ? ctx : gradient_context(ctx, l);
        layers_[size_t(l)]->backward_input(c, layer_input(m, l), dy, dx, layer_saved(m, l));
        if (final_gradients && !splits_[size_t(l)]) gradient_final(l);
      } else if (batch_w_[size_t(l)]) {  // B now, W over the whole batch after the last backward
        const auto rows = std::make_pair(offset, offset + n);
        if (l + 1 == count) Kokkos::deep_copy(options_.space, Kokkos::subview(batch_dy_[size_t(l)], rows, Kokkos::ALL), dy);
        if (options_.remat != Remat::Never && !(l == 0 && is_first()))  // recomputed: gone before W
          Kokkos::deep_copy(options_.space, Kokkos::subview(batch_x_[size_t(l)], rows, Kokkos::ALL), layer_input(m, l));
        layers_[size_t(l)]->backward_input(ctx, layer_input(m, l), dy, dx, layer_saved(m, l));
      } else {
        layers_[size_t(l)]->backward(gradient_context(ctx, l), layer_input(m, l), dy, dx,
                                     layer_saved(m, l));
        if (final_gradients) gradient_final(l);
      }
      dy = dx;
    }
  }
  if (!is_first()) {
    const Tracer::Scope send(tracer_, EventKind::Send, m, n * in_features_ * std::int64_t(sizeof(T)));
    input_grad->post_send(comm(), rank() - 1, backward_tag(m), n,
                          options_.link.enabled() ? &to_prev_ : nullptr);
  }
  if (m == last_backward_ && !split) batch_weights(m);  // after the send: off the critical path
}

template <class T>
void Cell<T>::batch_weights(int m) {
  const int count = int(layers_.size());
  if (std::none_of(batch_w_.begin(), batch_w_.end(), [](bool b) { return b; })) return;
  const PassContext ctx{options_.seed, step_, placement_.offset, true, false, options_.space};
  const std::int64_t n = batch_size_;
  const Tracer::Scope compute(tracer_, EventKind::BackwardWeights, m);
  for (int l = count - 1; l >= 0; --l) {
    if (!batch_w_[size_t(l)]) continue;
    ConstMatrix<T> x;
    if (l == 0 && is_first()) {
      x = Kokkos::subview(batch_inputs_, std::make_pair(std::int64_t(0), n), Kokkos::ALL);
    } else {  // the micro-batches' inputs, stacked in micro-batch order
      const Matrix<T>& stacked = batch_x_[size_t(l)];
      if (options_.remat == Remat::Never)  // stacked at B otherwise
        for (int k = 0; k < int(split_.size()); ++k) {
          const auto& mb = split_[size_t(k)];
          Kokkos::deep_copy(options_.space, Kokkos::subview(stacked, std::make_pair(mb.offset, mb.offset + mb.size), Kokkos::ALL),
                            layer_input(k, l));
        }
      x = Kokkos::subview(stacked, std::make_pair(std::int64_t(0), n), Kokkos::ALL);
    }
    const ConstMatrix<T> dy = Kokkos::subview(batch_dy_[size_t(l)], std::make_pair(std::int64_t(0), n), Kokkos::ALL);
    layers_[size_t(l)]->backward_weights(gradient_context(ctx, l), x, dy, SavedView<T>());
    if (training_) gradient_final(l);
  }
}

template <class T>
void Cell<T>::backward_weights(int m) {
  const PassContext ctx{options_.seed, step_, placement_.offset + split_[size_t(m)].offset, true, false,
                        options_.space};
  const bool final_gradients = training_ && m == last_weights_;
  const auto n = split_[size_t(m)].size;
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  activation_slot_[size_t(m)] = plan_->activations.slot[size_t(m)];
  const Tracer::Scope compute(tracer_, EventKind::BackwardWeights, m);
  const int count = int(layers_.size());
  for (int l = count - 1; l >= 0; --l) {
    if (!splits_[size_t(l)]) continue;
    ConstMatrix<T> dy;
    if (l + 1 < count) {
      const Matrix<T>& kept = weight_grads_[size_t(plan_->weight_grad.slot[size_t(m)])][size_t(l)];
      dy = Matrix<T>(kept.data(), n, kept.extent(1));
    } else if (is_last()) {
      dy = Matrix<T>(logit_grads_[slot].data(), n, out_features_);
    } else {
      dy = output_grads_[slot].rows(n);  // waited for by the B op
    }
    layers_[size_t(l)]->backward_weights(gradient_context(ctx, l), layer_input(m, l), dy,
                                         layer_saved(m, l));
    if (final_gradients) gradient_final(l);
  }
}

template <class T>
LossSums Cell<T>::run(const Schedule& schedule, const CellBufferPlan& plan, ConstMatrix<T> inputs,
                      const Targets<T>& targets,
                      std::int64_t n, std::uint64_t step, bool training) {
  require(n >= 1 && n <= options_.max_batch,
          fmt::format("rank {}: a batch of {} samples does not fit the pipeline's buffers "
                      "(1..{} samples)",
                      rank(), n, options_.max_batch));
  const int M = schedule.micro_batches;
  split_ = split_batch(n, M);
  batch_inputs_ = inputs;
  batch_targets_ = targets;
  batch_size_ = n;
  step_ = step;
  if (is_first())
    require(std::int64_t(inputs.extent(0)) >= n && std::int64_t(inputs.extent(1)) == in_features_,
            fmt::format("rank 0: inputs are {}x{}, expected at least {}x{}", inputs.extent(0),
                        inputs.extent(1), n, in_features_));
  if (is_last() && predict_logits_.extent(0) == 0)
    require(targets.size() >= n,
            fmt::format("rank {}: {} targets for a batch of {} samples", rank(), targets.size(), n));
  plan_ = &plan;
  activation_slot_.assign(size_t(M), -1);
  final_.assign(layers_.size(), false);
  announced_ = int(layers_.size());
  const auto& ops = schedule.ops[size_t(rank())];
  // Receives are posted once the plan frees their slot (after op i, or at
  // the start of the step), so transfers overlap compute.
  const bool precomputed = &plan == &train_plan_ && posts_.size() == ops.size() + 1;
  std::vector<std::vector<int>> local;
  if (!precomputed) {
    auto& posts = &plan == &train_plan_ ? posts_ : local;
    posts.assign(ops.size() + 1, {});
    for (int m = 0; m < M; ++m)
      if (plan.micro_batch.slot[size_t(m)] >= 0)
        posts[size_t(plan.micro_batch.free_after[size_t(m)] + 1)].push_back(m);
  }
  const auto& posts = &plan == &train_plan_ ? posts_ : local;
  try {
    return run_posted(ops, posts, training);
  } catch (...) {
    abandon();  // nothing posted may complete into these buffers later
    throw;
  }
}

template <class T>
void Cell<T>::abandon() noexcept {
  for (auto* buffers : {&inputs_, &outputs_, &output_grads_, &input_grads_})
    for (auto& b : *buffers) b.cancel();
}

template <class T>
LossSums Cell<T>::run_posted(const std::vector<Op>& ops, const std::vector<std::vector<int>>& posts,
                             bool training) {
  LossSums sums;
  for (int m : posts[0]) post_receives(m, training);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    switch (op.kind) {
      case OpKind::Forward: forward(op.micro_batch, true, training, sums); break;
      case OpKind::Recompute: forward(op.micro_batch, false, training, sums); break;
      case OpKind::Backward: backward(op.micro_batch, false); break;
      case OpKind::BackwardInput: backward(op.micro_batch, true); break;
      case OpKind::BackwardWeights: backward_weights(op.micro_batch); break;
    }
    for (int m : posts[i + 1]) post_receives(m, training);
  }
  const Tracer::Scope wait(tracer_, EventKind::Wait, -1);
  for (auto& b : outputs_) b.wait();
  for (auto& b : input_grads_) b.wait();
  if (loss_) sums = loss_->take_sums();  // the step's one fence for the loss sums
  return sums;
}

template <class T>
LossSums Cell<T>::train_step(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n,
                             std::uint64_t step, const BatchPlacement& placement) {
  require(n >= options_.micro_batches,
          fmt::format("a training batch of {} samples cannot be split into {} micro-batches", n,
                      options_.micro_batches));
  placement_ = placement;
  training_ = true;
  begin_gradients();
  struct Reset {
    Cell& cell;
    ~Reset() {
      cell.placement_ = BatchPlacement{};
      cell.training_ = false;
    }
  } reset{*this};
  return run(train_schedule_, train_plan_, inputs, targets, n, step, true);
}

template <class T>
LossSums Cell<T>::evaluate(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n) {
  const int M = int(std::min<std::int64_t>(options_.micro_batches, n));
  const Schedule schedule = forward_only(cells(), M);
  return run(schedule, plan_buffers(schedule, rank()), inputs, targets, n, step_, false);
}

template <class T>
void Cell<T>::predict(ConstMatrix<T> inputs, std::int64_t n, Matrix<T> logits) {
  if (is_last())
    require(std::int64_t(logits.extent(0)) >= n && std::int64_t(logits.extent(1)) == out_features_,
            fmt::format("rank {}: logits are {}x{}, expected at least {}x{}", rank(), logits.extent(0),
                        logits.extent(1), n, out_features_));
  predict_logits_ = is_last() ? logits : Matrix<T>();
  struct Reset {
    Matrix<T>& view;
    ~Reset() { view = Matrix<T>(); }
  } reset{predict_logits_};
  const int M = int(std::min<std::int64_t>(options_.micro_batches, n));
  const Schedule schedule = forward_only(cells(), M);
  run(schedule, plan_buffers(schedule, rank()), inputs, Targets<T>(), n, step_, false);
}

template class Cell<float>;
template class Cell<double>;

}  // namespace gpipe

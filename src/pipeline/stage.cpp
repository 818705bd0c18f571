#include "gpipe/pipeline/stage.hpp"
#include "gpipe/pipeline/wire_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "gpipe/core/error.hpp"
#include "gpipe/kernels/gemm.hpp"

namespace gpipe {

Schedule training_schedule(const CellOptions& options, int cells) {
  if (options.custom_schedule.cells > 0) return options.custom_schedule;
  return make_schedule(options.schedule, cells, options.micro_batches, options.remat, options.chunks,
                       options.w_group);
}

bool stores_16_bit(const CellOptions& options, std::int64_t scalar_bytes) {
  return options.activation_storage16 && packed_wire(options.wire) && scalar_bytes == 4;
}

SlotBytes StageSlotBytes::total() const {
  SlotBytes t;
  t.micro_batch = values.micro_batch + scalar.micro_batch;
  t.activations = values.activations + scalar.activations;
  t.input_grad = values.input_grad + scalar.input_grad;
  t.fixed = values.fixed + scalar.fixed;
  t.weight_grad = values.weight_grad + scalar.weight_grad;
  t.batch_weights = values.batch_weights + scalar.batch_weights;
  t.weight_group = values.weight_group + scalar.weight_group;
  return t;
}

std::int64_t stage_activation_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                    int stage, const Schedule& schedule, const CellOptions& options,
                                    std::int64_t scalar_bytes) {
  return planned_bytes(plan_buffers(schedule, stage),
                       stage_slot_bytes(shapes, partition, stage, schedule, options, scalar_bytes).total());
}

StageSlotBytes stage_slot_bytes(const std::vector<LayerShape>& shapes, const Partition& partition, int stage,
                                const Schedule& schedule, const CellOptions& options, std::int64_t scalar_bytes) {
  const int M = options.micro_batches;
  const int first = partition.first_layer(stage), count = partition.counts.at(size_t(stage));
  const std::int64_t rows = (options.max_batch + M - 1) / M;
  const auto layer = [&](int l) -> const LayerShape& { return shapes.at(size_t(first + l)); };
  // 16-bit storage: 2 bytes a kept value; the saved state stays scalar_bytes.
  const bool storage16 = stores_16_bit(options, scalar_bytes);
  const std::int64_t value_bytes = storage16 ? 2 : scalar_bytes;
  const auto bytes = [&](std::int64_t r, std::int64_t c) { return r * c * value_bytes; };
  const auto saved = [&](int l) { return layer(l).saved.elements(rows) * scalar_bytes; };
  const bool last = stage == schedule.stages - 1;
  const std::int64_t in = layer(0).input.size(), out = layer(count - 1).output.size();
  // Slot sizes (the gradient buffers are allocated from the same plan but
  // not counted).
  StageSlotBytes slot;
  slot.values.micro_batch = bytes(rows, in) + (last ? 0 : bytes(rows, out));
  slot.scalar.micro_batch = saved(count - 1);
  for (int l = 0; l + 1 < count; ++l) {
    slot.values.activations += bytes(rows, layer(l).output.size());
    slot.scalar.activations += saved(l);
  }
  // The logits stay float. The float working buffer a 16-bit layer input
  // is unpacked into is one per stage, not per micro-batch: like the
  // backward's ping-pong pair it is not activation storage (the memory
  // model counts all three, train/memory.cpp).
  slot.scalar.fixed = last ? rows * out * scalar_bytes : 0;
  // zero_bubble keeps the output gradient of every split layer (registry
  // entry splits_backward, as Layer::splits_backward) from its B op to its W op.
  for (int l = 0; l + 1 < count; ++l)
    if (layer(l).entry && layer(l).entry->splits_backward)
      slot.values.weight_grad += bytes(rows, layer(l).output.size());
  slot.scalar.batch_weights = batch_weight_bytes(shapes, partition, stage, options, scalar_bytes);
  // A grouped W's stacks stay scalar_bytes a value (like the whole-batch W's).
  slot.scalar.weight_group = weight_group_bytes(shapes, partition, stage, rows, scalar_bytes);
  return slot;
}

std::int64_t weight_group_bytes(const std::vector<LayerShape>& shapes, const Partition& partition, int stage,
                                std::int64_t rows, std::int64_t scalar_bytes) {
  const int first = partition.first_layer(stage), count = partition.counts.at(size_t(stage));
  std::int64_t widest_in = 0, widest_out = 0;
  for (int l = first; l < first + count; ++l) {
    const LayerShape& s = shapes.at(size_t(l));
    if (!s.entry || !s.entry->splits_backward || !s.entry->whole_batch_weights) continue;
    widest_out = std::max(widest_out, s.output.size());
    if (!(stage == 0 && l == 0)) widest_in = std::max(widest_in, s.input.size());
  }
  return rows * (widest_in + widest_out) * scalar_bytes;
}

std::int64_t batch_weight_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                int stage, const CellOptions& options, std::int64_t scalar_bytes) {
  const int first = partition.first_layer(stage), count = partition.counts.at(size_t(stage));
  std::int64_t outputs = 0, inputs = 0, widest = 0;
  for (int l = first; l < first + count; ++l) {
    const LayerShape& s = shapes.at(size_t(l));
    if (!s.entry || !s.entry->whole_batch_weights) continue;
    outputs += s.output.size();
    if (stage == 0 && l == 0) continue;  // reads the mini-batch itself
    inputs += s.input.size();
    widest = std::max(widest, s.input.size());
  }
  // Without re-materialization the inputs are stacked at W from the kept
  // activations into one shared buffer; with it each layer keeps its own.
  return options.max_batch * (outputs + (options.remat == Remat::Never ? widest : inputs)) * scalar_bytes;
}

template <class T>
PassContext StepState<T>::gradient_context(PassContext ctx, int l) {
  ctx.accumulate_gradients = !writes[size_t(l)];
  writes[size_t(l)] = false;
  return ctx;
}

template <class T>
void StepState<T>::gradient_final(int l) {
  if (!training || !gradient_ready) return;
  final[size_t(l)] = true;
  while (announced > 0 && final[size_t(announced - 1)]) gradient_ready(--announced);
}

template <class T>
Stage<T>::Stage(const ModelSpec& model, std::vector<Layer<T>*> layers, const Partition& partition,
                int local_offset, const StageLinks& links, const Schedule& training, MPI_Comm comm,
                const CellOptions& options, StepState<T>& state)
    : links_(links), comm_(comm), options_(options), state_(state), first_layer_(partition.first_layer(links.stage)),
      local_offset_(local_offset), layers_(std::move(layers)) {
  MPI_Comm_rank(comm_, &own_rank_);
  const int M = options.micro_batches;
  const int count = int(layers_.size());
  capacity_ = (options.max_batch + M - 1) / M;
  storage16_ = stores_16_bit(options, std::int64_t(sizeof(T)));
  for (auto* layer : layers_) layer->reserve(capacity_);
  in_features_ = layers_.front()->in_features();
  out_features_ = layers_.back()->out_features();
  const auto rows = capacity_;
  std::int64_t max_features = in_features_;
  for (auto* layer : layers_) max_features = std::max(max_features, layer->out_features());

  train_plan_ = plan_buffers(training, links_.stage);
  const int rank = training.rank_of_stage.at(size_t(links_.stage));
  for (const Op& op : training.ops.at(size_t(rank))) {
    if (op.stage != links_.stage) continue;
    if (op.kind == OpKind::Backward || op.kind == OpKind::BackwardInput) last_backward_ = op.micro_batch;
    if (op.kind == OpKind::BackwardWeights) last_weights_ = op.micro_batch;
  }
  for (auto* layer : layers_) {
    splits_.push_back(layer->splits_backward());
    // The W ops, grouped W and whole-batch W stacks read x through
    // layer_input, whose 16-bit slot store_output leaves unwritten for a
    // layer that does not read its input.
    if (layer->splits_backward() && !layer->reads_input_in_backward())
      throw std::logic_error("gpipe::Stage: layer " + std::to_string(layer->index()) + " (" + layer->type() +
                             ") splits its backward but declares it does not read its input");
  }
  const CellBufferPlan& plan = train_plan_;
  const auto uninitialized = [](const std::string& name) {
    return Kokkos::view_alloc(Kokkos::WithoutInitializing, name);
  };
  const auto saved_buffer = [&](int l, const std::string& name) {
    const auto elements = layers_[size_t(l)]->saved_size().elements(rows);
    return elements == 0 ? Vector<T>() : Vector<T>(uninitialized(name), elements);
  };
  const bool batch_source = links_.source == StageSource::Batch;
  const bool loss_sink = links_.sink == StageSink::Loss;
  // The whole-batch W's buffers (batch_weight_bytes counts the same).
  const bool whole_batch = plan.batch_weights >= 0;
  const bool shared_x = options.remat == Remat::Never;
  std::int64_t widest = 0;
  for (int l = 0; l < count; ++l) {
    const auto& layer = *layers_[size_t(l)];
    batch_w_.push_back(whole_batch && splits_[size_t(l)] && layer.whole_batch_weights());
    const auto make = [&](const char* what, std::int64_t cols) {
      return batch_w_.back() ? Matrix<T>(uninitialized(fmt::format("gpipe::Cell::{}[{}]", what, l)),
                                         options.max_batch, cols)
                             : Matrix<T>();
    };
    batch_dy_.push_back(make("batch_dy", layer.out_features()));
    const bool own_input = !(l == 0 && batch_source);  // else it reads the mini-batch itself
    batch_x_.push_back(shared_x || !own_input ? Matrix<T>() : make("batch_x", layer.in_features()));
    if (batch_w_.back() && own_input) widest = std::max(widest, layer.in_features());
  }
  if (shared_x && widest > 0) {
    batch_x_shared_ = Vector<T>(uninitialized("gpipe::Cell::batch_x"), options.max_batch * widest);
    for (int l = batch_source ? 1 : 0; l < count; ++l)
      if (batch_w_[size_t(l)])
        batch_x_[size_t(l)] = Matrix<T>(batch_x_shared_.data(), options.max_batch, layers_[size_t(l)]->in_features());
  }

  // The grouped W's stacking buffers (weight_group_bytes counts the same):
  // one stacked input and one stacked output gradient, reused layer by layer.
  std::int64_t group_in = 0, group_out = 0;
  for (int l = 0; l < count; ++l) {
    group_w_.push_back(plan.weight_group > 1 && splits_[size_t(l)] && layers_[size_t(l)]->whole_batch_weights());
    if (!group_w_.back()) continue;
    group_out = std::max(group_out, layers_[size_t(l)]->out_features());
    if (!(l == 0 && batch_source)) group_in = std::max(group_in, layers_[size_t(l)]->in_features());
  }
  if (group_in > 0) group_x_ = Vector<T>(uninitialized("gpipe::Cell::group_x"), plan.weight_group * rows * group_in);
  if (group_out > 0)
    group_dy_ = Vector<T>(uninitialized("gpipe::Cell::group_dy"), plan.weight_group * rows * group_out);

  // 16-bit storage: boundary buffers without a float buffer (BoundaryBuffer).
  const Format storage = storage16_ ? options_.wire : Format::fp32;
  for (int s = 0; s < plan.micro_batch.slots; ++s) {
    if (!batch_source)
      inputs_.emplace_back(fmt::format("gpipe::Cell::input[{}]", s), rows, in_features_, options_.space, storage);
    if (!loss_sink) {
      outputs_.emplace_back(fmt::format("gpipe::Cell::output[{}]", s), rows, out_features_, options_.space, storage);
      output_grads_.emplace_back(fmt::format("gpipe::Cell::output_grad[{}]", s), rows, out_features_,
                                 options_.space, storage);
    } else {
      logit_grads_.emplace_back(uninitialized(fmt::format("gpipe::Cell::logit_grad[{}]", s)), rows,
                                out_features_);
    }
    saved_last_.push_back(saved_buffer(count - 1, fmt::format("gpipe::Cell::saved_last[{}]", s)));
  }
  if (!batch_source)
    for (int s = 0; s < plan.input_grad.slots; ++s)
      input_grads_.emplace_back(fmt::format("gpipe::Cell::input_grad[{}]", s), rows, in_features_, options_.space,
                                storage);
  for (auto* buffers : {&inputs_, &outputs_, &output_grads_, &input_grads_})  // precision policy's wire
    for (auto& b : *buffers)
      if (!storage16_) b.set_wire_format(options_.wire);  // 16-bit storage: set at construction
  if (loss_sink) {
    logits_ = Matrix<T>(uninitialized("gpipe::Cell::logits"), rows, out_features_);
    loss_ = make_loss<T>(model.loss);
    loss_->set_execution_space(options_.space);
    loss_->reserve(rows, out_features_, std::max<std::int64_t>(model.labels_per_sample(), 1));  // the first step allocates nothing either
  }
  using Packed16 = Kokkos::View<std::uint16_t*, MemSpace>;
  const auto packed16 = [&](const std::string& name, std::int64_t cols) {
    return Packed16(uninitialized(name), size_t(rows * cols));
  };
  // Without 16-bit storage each layer's slots are one allocation (slot s at
  // row s x rows): a grouped W reads consecutive slots' rows in place.
  const auto block = [&](const char* what, int l, int slots, std::int64_t cols) {
    return slots > 0 ? Vector<T>(uninitialized(fmt::format("gpipe::Cell::{}[{}]", what, l)), slots * rows * cols)
                     : Vector<T>();
  };
  if (storage16_) weight_grads16_.resize(size_t(plan.weight_grad.slots));
  else weight_grads_.resize(size_t(plan.weight_grad.slots));
  for (int l = 0; l + 1 < count && !storage16_; ++l)
    weight_grad_block_.push_back(splits_[size_t(l)] ? block("weight_grad", l, plan.weight_grad.slots,
                                                            layers_[size_t(l)]->out_features())
                                                    : Vector<T>());
  for (int s = 0; s < plan.weight_grad.slots; ++s)
    for (int l = 0; l + 1 < count; ++l) {
      const std::string name = fmt::format("gpipe::Cell::weight_grad[{}][{}]", s, l);
      const std::int64_t cols = layers_[size_t(l)]->out_features();
      if (storage16_)
        weight_grads16_[size_t(s)].push_back(splits_[size_t(l)] ? packed16(name, cols) : Packed16());
      else
        weight_grads_[size_t(s)].push_back(
            splits_[size_t(l)] ? Matrix<T>(weight_grad_block_[size_t(l)].data() + s * rows * cols, rows, cols)
                               : Matrix<T>());
    }
  if (storage16_) kept16_.resize(size_t(plan.activations.slots));
  else kept_.resize(size_t(plan.activations.slots));
  saved_.resize(size_t(plan.activations.slots));
  for (int l = 0; l + 1 < count && !storage16_; ++l)
    kept_block_.push_back(block("activation", l, plan.activations.slots, layers_[size_t(l)]->out_features()));
  for (int s = 0; s < plan.activations.slots; ++s) {
    for (int l = 0; l + 1 < count; ++l) {
      const std::string name = fmt::format("gpipe::Cell::activation[{}][{}]", s, l);
      const std::int64_t cols = layers_[size_t(l)]->out_features();
      if (storage16_)
        kept16_[size_t(s)].push_back(packed16(name, cols));
      else
        kept_[size_t(s)].emplace_back(kept_block_[size_t(l)].data() + s * rows * cols, rows, cols);
      saved_[size_t(s)].push_back(saved_buffer(l, fmt::format("gpipe::Cell::saved[{}][{}]", s, l)));
    }
  }
  grad_ping_ = Vector<T>(uninitialized("gpipe::Cell::grad_ping"), rows * max_features);
  grad_pong_ = Vector<T>(uninitialized("gpipe::Cell::grad_pong"), rows * max_features);
  if (storage16_) {  // a working buffer, as grad_ping_ / grad_pong_ (cell_memory's gradient_buffers)
    std::int64_t widest_input = 0;
    for (auto* layer : layers_) widest_input = std::max(widest_input, layer->in_features());
    input_work_ = Vector<T>(uninitialized("gpipe::Cell::input_work"), rows * widest_input);
  }
  const auto shapes = model_shapes(model);
  activation_bytes_ =
      stage_activation_bytes(shapes, partition, links_.stage, training, options, std::int64_t(sizeof(T)));
}

template <class T>
std::int64_t Stage<T>::wire_value_bytes() const {
  return packed_wire(options_.wire) ? 2 : std::int64_t(sizeof(T));
}

template <class T>
void Stage<T>::begin(const CellBufferPlan& plan) {
  plan_ = &plan;
  activation_slot_.assign(state_.split.size(), -1);
}

namespace {
// 16-bit storage: the first rows x cols values of `packed` unpacked into work.
template <class T>
Matrix<T> unpacked(const ExecSpace& space, Format format, const Kokkos::View<std::uint16_t*, MemSpace>& packed,
                   std::int64_t rows, std::int64_t cols, T* work) {
  if constexpr (std::is_same_v<T, float>) unpack_wire(space, format, packed.data(), rows * cols, work);
  return Matrix<T>(work, size_t(rows), size_t(cols));
}
}  // namespace

template <class T>
ConstMatrix<T> Stage<T>::layer_input(int m, int layer) const {
  const auto& mb = state_.split[size_t(m)];
  if (storage16_ && layer > 0)  // unpacked from its 16-bit slot
    return unpacked(options_.space, options_.wire, kept16_[size_t(activation_slot_[size_t(m)])][size_t(layer - 1)],
                    mb.size, layers_[size_t(layer)]->in_features(), input_work_.data());
  if (storage16_ && links_.source == StageSource::Receive)
    return inputs_[size_t(plan_->micro_batch.slot[size_t(m)])].load(mb.size, input_work_.data());
  if (layer > 0) return layer_output(m, layer - 1);
  if (links_.source == StageSource::Receive) return inputs_[size_t(plan_->micro_batch.slot[size_t(m)])].rows(mb.size);
  return Kokkos::subview(state_.batch_inputs, std::make_pair(mb.offset, mb.offset + mb.size), Kokkos::ALL);
}

template <class T>
ConstMatrix<T> Stage<T>::backward_input_values(int m, int layer) const {
  const Layer<T>& l = *layers_[size_t(layer)];
  if (l.reads_input_in_backward()) return layer_input(m, layer);
  return ConstMatrix<T>(static_cast<const T*>(nullptr), size_t(state_.split[size_t(m)].size), size_t(l.in_features()));
}

template <class T>
Matrix<T> Stage<T>::layer_output(int m, int layer) const {
  const auto n = state_.split[size_t(m)].size;
  if (storage16_) return forward_output(m, layer);
  if (layer + 1 == int(layers_.size())) {
    return links_.sink == StageSink::Loss ? Matrix<T>(logits_.data(), n, out_features_)
                                          : outputs_[size_t(plan_->micro_batch.slot[size_t(m)])].rows(n);
  }
  const Matrix<T>& storage = kept_[size_t(activation_slot_[size_t(m)])][size_t(layer)];
  return Matrix<T>(storage.data(), n, storage.extent(1));
}

template <class T>
Matrix<T> Stage<T>::forward_output(int m, int layer) const {
  const auto n = state_.split[size_t(m)].size;
  if (layer + 1 == int(layers_.size()) && links_.sink == StageSink::Loss)
    return Matrix<T>(logits_.data(), n, out_features_);
  // Alternating working buffers: layer l + 1 reads layer l's output from one
  // while it writes its own into the other.
  T* buffer = layer % 2 == 0 ? grad_ping_.data() : grad_pong_.data();
  return Matrix<T>(buffer, n, layers_[size_t(layer)]->out_features());
}

template <class T>
void Stage<T>::store_output(int m, int layer, const Matrix<T>& y, bool exact) {
  if constexpr (std::is_same_v<T, float>) {
    if (layer + 1 < int(layers_.size())) {
      if (!layers_[size_t(layer + 1)]->reads_input_in_backward()) {
        // Kept for nobody: the next layer's backward never reads its input
        // (backward_input_values), so y is only rounded for its forward.
        if (!exact) round_activations(options_.space, options_.wire, y.data(), std::int64_t(y.span()));
        return;
      }
      std::uint16_t* slot = kept16_[size_t(activation_slot_[size_t(m)])][size_t(layer)].data();
      if (exact)  // y holds representable values: packed, not written back
        pack_wire(options_.space, options_.wire, y.data(), std::int64_t(y.span()), slot);
      else
        round_and_pack_wire(options_.space, options_.wire, y.data(), std::int64_t(y.span()), slot);
      return;
    }
    if (!exact) round_activations(options_.space, options_.wire, y.data(), std::int64_t(y.span()));
    if (links_.sink == StageSink::Send) outputs_[size_t(plan_->micro_batch.slot[size_t(m)])].store(y);
  }
}

template <class T>
ConstMatrix<T> Stage<T>::kept_output_grad(int m, int l) const {
  const auto n = state_.split[size_t(m)].size;
  const auto slot = size_t(plan_->weight_grad.slot[size_t(m)]);
  if (storage16_)
    return unpacked(options_.space, options_.wire, weight_grads16_[slot][size_t(l)], n,
                    layers_[size_t(l)]->out_features(), grad_ping_.data());
  const Matrix<T>& kept = weight_grads_[slot][size_t(l)];
  return Matrix<T>(kept.data(), n, kept.extent(1));
}

template <class T>
ConstMatrix<T> Stage<T>::received_output_grad(int m, T* work) const {
  const auto n = state_.split[size_t(m)].size;
  const auto& buffer = output_grads_[size_t(plan_->micro_batch.slot[size_t(m)])];
  return storage16_ ? buffer.load(n, work) : buffer.rows(n);
}

template <class T>
SavedView<T> Stage<T>::layer_saved(int m, int layer) const {
  const Vector<T>& storage =
      layer + 1 == int(layers_.size())
          ? saved_last_[size_t(plan_->micro_batch.slot[size_t(m)])]
          : saved_[size_t(activation_slot_[size_t(m)])][size_t(layer)];
  return SavedView<T>(storage.data(), storage.extent(0));
}

template <class T>
void Stage<T>::post_receives(int m) {
  const auto rows = state_.split[size_t(m)].size;
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  const bool input = links_.source == StageSource::Receive;
  const bool gradient = state_.training && links_.sink == StageSink::Send;
  const std::int64_t bytes =  // on the wire: 2 bytes a value with a 16-bit wire
      rows * wire_value_bytes() * ((input ? in_features_ : 0) + (gradient ? out_features_ : 0));
  if (bytes == 0) return;
  const Tracer::Scope receive(state_.tracer, EventKind::Receive, m, bytes);
  const int S = links_.stages, s = links_.stage;
  // A stamped receive only from another rank: a self-message crosses no link.
  if (input)
    inputs_[slot].post_recv(comm_, links_.source_rank, forward_tag(m, s - 1, S), rows, "forward activation", m,
                            links_.to_source != nullptr);
  if (gradient)
    output_grads_[slot].post_recv(comm_, links_.sink_rank, backward_tag(m, s, S), rows, "gradient", m,
                                  links_.to_sink != nullptr);
}

template <class T>
void Stage<T>::deliver(const BoundaryBuffer<T>& received, int m) {
  const WireTime& w = received.wire_time();
  if (w.bytes == 0) return;
  if (state_.tracer) state_.tracer->record_ns(EventKind::Wire, m, w.sent_ns, w.arrival_ns, w.bytes);
  if (link_clock_ns() >= w.arrival_ns) return;  // the wire time was hidden
  const Tracer::Scope hold(state_.tracer, EventKind::LinkWait, m);
  hold_until(w.arrival_ns);
}

template <class T>
void Stage<T>::forward(int m, bool whole_stage, LossSums& sums) {
  Tracer* tracer = state_.tracer;
  const auto& mb = state_.split[size_t(m)];
  const PassContext ctx{state_.seed, state_.step, state_.placement.offset + mb.offset, state_.training,
                        !whole_stage, options_.space};
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  activation_slot_[size_t(m)] =
      whole_stage ? plan_->forward_slot[size_t(m)] : plan_->activations.slot[size_t(m)];
  if (links_.source == StageSource::Receive && whole_stage) {
    while (!inputs_[slot].arrived() && kernels::FrozenWeights::pack_next()) {  // idle: pack the weights ahead
    }
    {
      const Tracer::Scope wait(tracer, EventKind::Wait, m);
      inputs_[slot].wait();
    }
    deliver(inputs_[slot], m);
  }
  const bool send = links_.sink == StageSink::Send;
  if (send && whole_stage && outputs_[slot].pending()) {  // the slot's previous send
    const Tracer::Scope wait(tracer, EventKind::Wait, m);
    outputs_[slot].wait();
  }
  {
    const Tracer::Scope compute(tracer, whole_stage ? EventKind::Forward : EventKind::Recompute, m);
    const int count = whole_stage ? int(layers_.size()) : int(layers_.size()) - 1;
    ConstMatrix<T> x = layer_input(m, 0);
    for (int l = 0; l < count; ++l) {
      const Matrix<T> y = layer_output(m, l);  // 16-bit storage: a float working buffer
      layers_[size_t(l)]->forward(ctx, x, y, layer_saved(m, l));
      // 16-bit wire: every activation a 16-bit value (16-bit storage: rounded
      // and packed in one pass, store_output). A layer that preserves values
      // (ReLU, disjoint max pooling, flatten) of a rounded input (l > 0: the
      // previous layer's rounded output) needs no rounding.
      const bool exact = l > 0 && layers_[size_t(l)]->preserves_values();
      if (storage16_) store_output(m, l, y, exact);
      else if (packed_wire(options_.wire) && !exact)
        round_activations(options_.space, options_.wire, y.data(), std::int64_t(y.span()));
      x = y;
    }
    if (!whole_stage) return;  // a recompute stops before the stage output
    if (!send) {
      const Matrix<T> out = layer_output(m, int(layers_.size()) - 1);
      if (state_.predict_logits.extent(0) > 0) {
        Kokkos::deep_copy(options_.space,
                          Kokkos::subview(state_.predict_logits, std::make_pair(mb.offset, mb.offset + mb.size),
                                          Kokkos::ALL),
                          out);
        return;
      }
      const Targets<T> targets = state_.batch_targets.rows(mb.offset, mb.size);
      const Matrix<T> dlogits =
          state_.training ? Matrix<T>(logit_grads_[slot].data(), mb.size, out_features_) : Matrix<T>();
      const std::int64_t N = state_.placement.global_size > 0 ? state_.placement.global_size : state_.batch_size;
      loss_->accumulate(out, targets, T(state_.loss_scale / double(N)), dlogits);  // read once per run
      return;
    }
  }
  const Tracer::Scope sending(tracer, EventKind::Send, m, mb.size * out_features_ * wire_value_bytes());
  outputs_[slot].post_send(comm_, links_.sink_rank, forward_tag(m, links_.stage, links_.stages), mb.size,
                           links_.to_sink);
}

template <class T>
void Stage<T>::backward(int m, bool split) {
  Tracer* tracer = state_.tracer;
  const auto n = state_.split[size_t(m)].size;
  const auto offset = state_.split[size_t(m)].offset;
  const PassContext ctx{state_.seed, state_.step, state_.placement.offset + offset, true, false, options_.space};
  const bool final_gradients = state_.training && m == last_backward_;
  const auto slot = size_t(plan_->micro_batch.slot[size_t(m)]);
  activation_slot_[size_t(m)] = plan_->activations.slot[size_t(m)];
  ConstMatrix<T> dy;
  if (links_.sink == StageSink::Loss) {
    dy = Matrix<T>(logit_grads_[slot].data(), n, out_features_);
  } else {
    while (!output_grads_[slot].arrived() && kernels::FrozenWeights::pack_next()) {  // idle: pack the weights ahead
    }
    {
      const Tracer::Scope wait(tracer, EventKind::Wait, m);
      output_grads_[slot].wait();
    }
    deliver(output_grads_[slot], m);
    dy = received_output_grad(m, grad_pong_.data());  // 16-bit storage: the last layer's dx goes to grad_ping_
  }
  const bool send = links_.source == StageSource::Receive;
  BoundaryBuffer<T>* input_grad = send ? &input_grads_[size_t(plan_->input_grad.slot[size_t(m)])] : nullptr;
  if (input_grad && input_grad->pending()) {  // the slot's previous send (its receive is posted)
    const Tracer::Scope wait(tracer, EventKind::Wait, m);
    input_grad->wait();
  }
  {
    const Tracer::Scope compute(tracer, split ? EventKind::BackwardInput : EventKind::Backward, m);
    const int count = int(layers_.size());
    for (int l = count - 1; l >= 0; --l) {
      const int local = local_offset_ + l;
      Matrix<T> dx;
      if (storage16_ && (l > 0 || send) && !(l > 0 && batch_w_[size_t(l - 1)])) {  // packed after the layer
        T* buffer = (count - 1 - l) % 2 == 0 ? grad_ping_.data() : grad_pong_.data();
        dx = Matrix<T>(buffer, n, layers_[size_t(l)]->in_features());
      } else if (l > 0 && split && splits_[size_t(l - 1)]) {  // layer l-1's dL/dy, kept for its W op
        const Matrix<T>& kept = weight_grads_[size_t(plan_->weight_grad.slot[size_t(m)])][size_t(l - 1)];
        dx = Matrix<T>(kept.data(), n, kept.extent(1));
      } else if (l > 0 && batch_w_[size_t(l - 1)]) {  // layer l-1's dL/dy, stacked for the whole-batch W
        const Matrix<T>& stacked = batch_dy_[size_t(l - 1)];
        dx = Matrix<T>(stacked.data() + offset * std::int64_t(stacked.extent(1)), n, stacked.extent(1));
      } else if (l > 0) {
        T* buffer = (count - 1 - l) % 2 == 0 ? grad_ping_.data() : grad_pong_.data();
        dx = Matrix<T>(buffer, n, layers_[size_t(l)]->in_features());
      } else if (send) {
        dx = input_grad->rows(n);
      }
      if (split) {
        const PassContext c = splits_[size_t(l)] ? ctx : state_.gradient_context(ctx, local);
        layers_[size_t(l)]->backward_input(c, backward_input_values(m, l), dy, dx, layer_saved(m, l));
        if (final_gradients && !splits_[size_t(l)]) state_.gradient_final(local);
      } else if (batch_w_[size_t(l)]) {  // B now, W over the whole batch in the BatchWeights op
        const auto rows = std::make_pair(offset, offset + n);
        if (l + 1 == count) Kokkos::deep_copy(options_.space, Kokkos::subview(batch_dy_[size_t(l)], rows, Kokkos::ALL), dy);
        const ConstMatrix<T> x = layer_input(m, l);  // unpacked once (16-bit storage) for both uses
        if (options_.remat != Remat::Never && batch_x_[size_t(l)].extent(0) > 0)  // recomputed: gone before W
          Kokkos::deep_copy(options_.space, Kokkos::subview(batch_x_[size_t(l)], rows, Kokkos::ALL), x);
        layers_[size_t(l)]->backward_input(ctx, x, dy, dx, layer_saved(m, l));
      } else {
        layers_[size_t(l)]->backward(state_.gradient_context(ctx, local), backward_input_values(m, l), dy, dx,
                                     layer_saved(m, l));
        if (final_gradients) state_.gradient_final(local);
      }
      // 16-bit wire: every input gradient a 16-bit value; none to round where
      // the layer preserves values of a rounded dy (l + 1 < count: the next
      // layer's rounded dx).
      const bool exact = l + 1 < count && layers_[size_t(l)]->preserves_values();
      if (packed_wire(options_.wire) && dx.data() && !exact)
        round_activations(options_.space, options_.wire, dx.data(), std::int64_t(dx.span()));
      if constexpr (std::is_same_v<T, float>) {
        if (storage16_ && l > 0 && split && splits_[size_t(l - 1)])  // kept for layer l-1's W op
          pack_wire(options_.space, options_.wire, dx.data(), std::int64_t(dx.span()),
                    weight_grads16_[size_t(plan_->weight_grad.slot[size_t(m)])][size_t(l - 1)].data());
        else if (storage16_ && l == 0 && send)
          input_grad->store(dx);
      }
      dy = dx;
    }
  }
  if (send) {
    const Tracer::Scope sending(tracer, EventKind::Send, m, n * in_features_ * wire_value_bytes());
    input_grad->post_send(comm_, links_.source_rank, backward_tag(m, links_.stage - 1, links_.stages), n,
                          links_.to_source);
  }
}

template <class T>
void Stage<T>::batch_weights(int m) {
  const int count = int(layers_.size());
  if (std::none_of(batch_w_.begin(), batch_w_.end(), [](bool b) { return b; })) return;
  const PassContext ctx{state_.seed, state_.step, state_.placement.offset, true, false, options_.space};
  const std::int64_t n = state_.batch_size;
  const Tracer::Scope compute(state_.tracer, EventKind::BackwardWeights, m);
  for (int l = count - 1; l >= 0; --l) {
    if (!batch_w_[size_t(l)]) continue;
    ConstMatrix<T> x;
    if (l == 0 && links_.source == StageSource::Batch) {
      x = Kokkos::subview(state_.batch_inputs, std::make_pair(std::int64_t(0), n), Kokkos::ALL);
    } else {  // the micro-batches' inputs, stacked in micro-batch order
      const Matrix<T>& stacked = batch_x_[size_t(l)];
      if (options_.remat == Remat::Never)  // stacked at B otherwise
        for (int k = 0; k < int(state_.split.size()); ++k) {
          const auto& mb = state_.split[size_t(k)];
          Kokkos::deep_copy(options_.space,
                            Kokkos::subview(stacked, std::make_pair(mb.offset, mb.offset + mb.size), Kokkos::ALL),
                            layer_input(k, l));
        }
      x = Kokkos::subview(stacked, std::make_pair(std::int64_t(0), n), Kokkos::ALL);
    }
    const ConstMatrix<T> dy = Kokkos::subview(batch_dy_[size_t(l)], std::make_pair(std::int64_t(0), n), Kokkos::ALL);
    layers_[size_t(l)]->backward_weights(state_.gradient_context(ctx, local_offset_ + l), x, dy, SavedView<T>());
    state_.gradient_final(local_offset_ + l);
  }
}

template <class T>
void Stage<T>::backward_weights(int m, int count) {
  const int end = m + count;
  const auto& first_mb = state_.split[size_t(m)];
  const PassContext ctx{state_.seed, state_.step, state_.placement.offset + first_mb.offset, true, false,
                        options_.space};
  const bool final_gradients = state_.training && last_weights_ >= m && last_weights_ < end;
  for (int q = m; q < end; ++q) activation_slot_[size_t(q)] = plan_->activations.slot[size_t(q)];
  const Tracer::Scope compute(state_.tracer, EventKind::BackwardWeights, m);
  const int layers = int(layers_.size());
  // dL/dy of layer l for micro-batch q, as the B op left it (unpacked into
  // grad_ping_ with 16-bit storage: each use below consumes it before the
  // next call; layer_input unpacks into input_work_, another buffer).
  const auto output_grad = [&](int q, int l) -> ConstMatrix<T> {
    if (l + 1 < layers) return kept_output_grad(q, l);
    if (links_.sink == StageSink::Loss) {
      const auto slot = size_t(plan_->micro_batch.slot[size_t(q)]);
      return Matrix<T>(logit_grads_[slot].data(), state_.split[size_t(q)].size, out_features_);
    }
    return received_output_grad(q, grad_ping_.data());  // waited for by the B op
  };
  for (int l = layers - 1; l >= 0; --l) {
    if (!splits_[size_t(l)]) continue;
    if (count > 1 && group_w_[size_t(l)]) {
      // One pass over the group's rows, stacked in micro-batch order (the
      // micro-batches of a split are consecutive rows of the mini-batch).
      const std::int64_t begin_row = first_mb.offset;
      const std::int64_t rows = state_.split[size_t(end - 1)].offset + state_.split[size_t(end - 1)].size - begin_row;
      const std::int64_t in = layers_[size_t(l)]->in_features(), out = layers_[size_t(l)]->out_features();
      const bool from_batch = l == 0 && links_.source == StageSource::Batch;
      // In place when the group's micro-batches sit in consecutive slots of
      // the layer's one allocation (the same values, so the same GEMM).
      const bool dy_in_place = !storage16_ && l + 1 < layers &&
                               slot_rows_stacked(state_.split, plan_->weight_grad.slot, m, count, capacity_);
      const bool x_in_place = !storage16_ && l > 0 &&
                              slot_rows_stacked(state_.split, plan_->activations.slot, m, count, capacity_);
      const Matrix<T> dy(dy_in_place ? weight_grads_[size_t(plan_->weight_grad.slot[size_t(m)])][size_t(l)].data()
                                     : group_dy_.data(),
                         rows, out);
      const Matrix<T> stacked_x(from_batch   ? nullptr
                                : x_in_place ? kept_[size_t(plan_->activations.slot[size_t(m)])][size_t(l - 1)].data()
                                             : group_x_.data(),
                                from_batch ? 0 : rows, in);
      for (int q = m; q < end; ++q) {
        const auto& mb = state_.split[size_t(q)];
        const auto at = std::make_pair(mb.offset - begin_row, mb.offset - begin_row + mb.size);
        if (!dy_in_place) Kokkos::deep_copy(options_.space, Kokkos::subview(dy, at, Kokkos::ALL), output_grad(q, l));
        if (!from_batch && !x_in_place)
          Kokkos::deep_copy(options_.space, Kokkos::subview(stacked_x, at, Kokkos::ALL), layer_input(q, l));
        stacked_rows_copied_ += (dy_in_place ? 0 : mb.size) + (from_batch || x_in_place ? 0 : mb.size);
      }
      const ConstMatrix<T> x =
          from_batch ? ConstMatrix<T>(Kokkos::subview(state_.batch_inputs, std::make_pair(begin_row, begin_row + rows),
                                                      Kokkos::ALL))
                     : ConstMatrix<T>(stacked_x);
      layers_[size_t(l)]->backward_weights(state_.gradient_context(ctx, local_offset_ + l), x, dy, SavedView<T>());
    } else {
      for (int q = m; q < end; ++q) {
        const PassContext c{state_.seed, state_.step, state_.placement.offset + state_.split[size_t(q)].offset, true,
                            false, options_.space};
        layers_[size_t(l)]->backward_weights(state_.gradient_context(c, local_offset_ + l), layer_input(q, l),
                                             output_grad(q, l), layer_saved(q, l));
      }
    }
    if (final_gradients) state_.gradient_final(local_offset_ + l);
  }
}

template <class T>
void Stage<T>::wait_sends() {
  for (auto& b : outputs_) b.wait();
  for (auto& b : input_grads_) b.wait();
}

template <class T>
LossSums Stage<T>::take_loss_sums() {
  return loss_ ? loss_->take_sums() : LossSums();
}

template <class T>
void Stage<T>::abandon() noexcept {
  if (loss_) try {
      (void)loss_->take_sums();  // a failed run's partial sums must not reach the next run's
    } catch (...) {
    }
  for (auto* buffers : {&inputs_, &outputs_, &output_grads_, &input_grads_})
    for (auto& b : *buffers) b.cancel();
}

template struct StepState<float>;
template struct StepState<double>;
#define GPIPE_INSTANTIATE(T) template class Stage<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

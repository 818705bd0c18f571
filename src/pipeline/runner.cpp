#include "gpipe/pipeline/runner.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpipe/core/error.hpp"
#include "gpipe/layers/tied.hpp"

namespace gpipe {

std::int64_t cell_activation_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                   int cell, const CellOptions& options, std::int64_t scalar_bytes) {
  const int K = options.custom_schedule.cells > 0 ? options.custom_schedule.cells
                                                   : partition.cells() / std::max(options.chunks, 1);
  const Schedule schedule = training_schedule(options, K);
  std::int64_t total = 0;
  for (int s : stages_of_rank(schedule, cell))
    total += stage_activation_bytes(shapes, partition, s, schedule, options, scalar_bytes);
  return total;
}

namespace {
// Throws InputError unless `schedule` fits `ranks` ranks and `partition`.
void check_schedule(const Schedule& schedule, const Partition& partition, int ranks) {
  require(schedule.cells == ranks,
          fmt::format("pipeline: the schedule has {} cells but the communicator has {} ranks", schedule.cells,
                      ranks));
  require(partition.cells() == schedule.stages,
          fmt::format("pipeline: the partition has {} stages but the schedule has {} ({} cells x pipeline.chunks)",
                      partition.cells(), schedule.stages, schedule.cells));
  require(int(schedule.rank_of_stage.size()) == schedule.stages && int(schedule.ops.size()) == schedule.cells,
          fmt::format("schedule: its stage map has {} entries and {} op lists, expected {} and {}",
                      schedule.rank_of_stage.size(), schedule.ops.size(), schedule.stages, schedule.cells));
  for (int s = 0; s < schedule.stages; ++s)
    require(schedule.rank_of_stage[size_t(s)] >= 0 && schedule.rank_of_stage[size_t(s)] < ranks,
            fmt::format("schedule: stage {} is mapped to rank {}, outside 0..{}", s,
                        schedule.rank_of_stage[size_t(s)], ranks - 1));
  for (int k = 0; k < schedule.cells; ++k)
    for (size_t i = 0; i < schedule.ops[size_t(k)].size(); ++i) {
      const Op& op = schedule.ops[size_t(k)][i];
      require(op.stage >= 0 && op.stage < schedule.stages &&
                  schedule.rank_of_stage[size_t(op.stage)] == k,
              fmt::format("schedule: op {} of rank {} ({}{} of stage {}) names a stage rank {} does not run", i, k,
                          op_letter(op.kind), op.micro_batch, op.stage, k));
      require(op.micro_batch >= 0 && op.micro_batch < schedule.micro_batches,
              fmt::format("schedule: op {} of rank {} names micro-batch {}, outside 0..{}", i, k, op.micro_batch,
                          schedule.micro_batches - 1));
      require(op.count >= 1 && op.end() <= schedule.micro_batches &&
                  (op.count == 1 || op.kind == OpKind::BackwardWeights),
              fmt::format("schedule: op {} of rank {} ({} of micro-batches {}..{}) covers micro-batches outside "
                          "0..{} or is not a W op",
                          i, k, op_letter(op.kind), op.micro_batch, op.end() - 1, schedule.micro_batches - 1));
    }
}
}  // namespace

template <class T>
Runner<T>::Runner(const ModelSpec& model, const Partition& partition, MPI_Comm comm, const CellOptions& options)
    : comm_(comm), options_(options), partition_(partition) {
  require(options.max_batch >= options.micro_batches,
          fmt::format("training.micro_batches: {} micro-batches cannot split a batch of {} samples",
                      options.micro_batches, options.max_batch));
  train_schedule_ = training_schedule(options, comm_.size());
  options_.custom_schedule = Schedule();  // kept once, in train_schedule_
  check_schedule(train_schedule_, partition, comm_.size());
  require(train_schedule_.micro_batches == options.micro_batches,
          fmt::format("schedule: {} micro-batches, but training.micro_batches is {}",
                      train_schedule_.micro_batches, options.micro_batches));
  const int S = train_schedule_.stages;
  const std::vector<int> mine = stages_of_rank(train_schedule_, rank());
  require(!mine.empty(), fmt::format("schedule: rank {} runs no stage", rank()));
  local_of_stage_.assign(size_t(S), -1);

  // Layers and their parameters, as views into one flat buffer per rank.
  const auto shapes = model_shapes(model);
  std::int64_t total = 0, total_state = 0;
  for (int s : mine)
    for (int l = partition.first_layer(s); l < partition.first_layer(s) + partition.counts[size_t(s)]; ++l) {
      layers_.push_back(make_layer<T>(shapes.at(size_t(l))));
      global_layers_.push_back(l);
      total += layers_.back()->parameter_count();
      total_state += layers_.back()->state_count();
    }
  // A tied lm_head on the rank of its token_embedding (layers/tied.hpp) is
  // one matrix: the head's values are the embedding's, and its V x d
  // gradient slot, the last of the gradient buffer, is summed into the
  // embedding's by Pipeline before the update (docs/design.md).
  const TiedLayers tie = tied_layers(model);
  const int head = tie.tied() ? local_layer(tie.head) : -1, embedding = tie.tied() ? local_layer(tie.embedding) : -1;
  if (head >= 0 && embedding >= 0) {
    for (size_t l = size_t(head) + 1; l < layers_.size(); ++l)
      require(layers_[l]->parameter_count() == 0,
              fmt::format("{}: lm_head: tie: layer {} ({}) after the tied head has parameters; the head and its "
                          "token_embedding share one matrix on rank {}, which needs the head to be its rank's last "
                          "layer with parameters",
                          model.layers.at(size_t(tie.head)).where, global_layers_[l],
                          model.layers.at(size_t(global_layers_[l])).type, rank()));
    shared_head_ = head;
  }
  const std::vector<std::int64_t> values_at = value_offsets();
  params_ = Vector<T>("gpipe::Cell::parameters", values_at.back());
  grads_ = Vector<T>("gpipe::Cell::gradients", total);
  layer_state_ = Vector<T>("gpipe::Cell::state", total_state);
  std::int64_t offset = 0, state_offset = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto& layer = layers_[l];
    const bool shared = int(l) == shared_head_;  // its values: the embedding's, initialized there
    layer->bind(params_.data() + values_at[shared ? size_t(embedding) : l], grads_.data() + offset);
    layer->bind_state(layer_state_.data() + state_offset);
    if (!shared) layer->initialize(options.seed);
    offset += layer->parameter_count();
    state_offset += layer->state_count();
  }

  if (options.link.enabled()) wires_.assign(size_t(comm_.size()), Wire(options.link));
  const auto wire = [&](int peer) { return wires_.empty() || peer == rank() ? nullptr : &wires_[size_t(peer)]; };
  state_.seed = options.seed;
  int local = 0;
  for (int s : mine) {
    StageLinks links;
    links.stage = s;
    links.stages = S;
    if (s > 0) {
      links.source = StageSource::Receive;
      links.source_rank = train_schedule_.rank_of_stage[size_t(s - 1)];
      links.to_source = wire(links.source_rank);
    }
    if (s + 1 < S) {
      links.sink = StageSink::Send;
      links.sink_rank = train_schedule_.rank_of_stage[size_t(s + 1)];
      links.to_sink = wire(links.sink_rank);
    }
    std::vector<Layer<T>*> stage_layers;
    for (int l = 0; l < partition.counts[size_t(s)]; ++l) stage_layers.push_back(layers_[size_t(local + l)].get());
    local_of_stage_[size_t(s)] = int(stages_.size());
    stages_.push_back(std::make_unique<Stage<T>>(model, std::move(stage_layers), partition, local, links,
                                                 train_schedule_, comm_.get(), options_, state_));
    local += partition.counts[size_t(s)];
    train_plans_.push_back(stages_.back()->train_plan());
    activation_bytes_ += stages_.back()->activation_bytes();
  }
  train_posts_ = receive_posts(train_schedule_, train_plans_);
}

template <class T>
int Runner<T>::local_layer(int layer) const {
  const auto it = std::lower_bound(global_layers_.begin(), global_layers_.end(), layer);
  return it != global_layers_.end() && *it == layer ? int(it - global_layers_.begin()) : -1;
}

template <class T>
int Runner<T>::rank_of_layer(int layer) const {
  int s = 0;
  while (s + 1 < partition_.cells() && partition_.first_layer(s + 1) <= layer) ++s;
  return train_schedule_.rank_of_stage.at(size_t(s));
}

template <class T>
std::vector<std::int64_t> Runner<T>::parameter_offsets() const {
  std::vector<std::int64_t> out{0};
  for (const auto& layer : layers_) out.push_back(out.back() + layer->parameter_count());
  return out;
}

template <class T>
std::vector<std::int64_t> Runner<T>::value_offsets() const {
  std::vector<std::int64_t> out{0};
  for (size_t l = 0; l < layers_.size(); ++l)
    out.push_back(out.back() + (int(l) == shared_head_ ? 0 : layers_[l]->parameter_count()));
  return out;
}

template <class T>
Vector<T> Runner<T>::gradients() const {
  if (zero_pending_) {
    Kokkos::deep_copy(options_.space, grads_, T(0));
    zero_pending_ = false;
  }
  return grads_;
}

template <class T>
void Runner<T>::begin_gradients() {
  state_.writes.assign(layers_.size(), false);
  if (!zero_pending_) return;
  zero_pending_ = false;
  std::int64_t offset = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::int64_t count = layers_[l]->parameter_count();
    if (layers_[l]->writes_gradients()) state_.writes[l] = true;
    else if (count > 0)
      Kokkos::deep_copy(options_.space, Kokkos::subview(grads_, std::make_pair(offset, offset + count)), T(0));
    offset += count;
  }
}

template <class T>
typename Runner<T>::Posts Runner<T>::receive_posts(const Schedule& schedule,
                                                   const std::vector<CellBufferPlan>& plans) const {
  // Receives are posted once the plan frees their slot (after op i, or at
  // the start of the step), so transfers overlap compute.
  Posts posts(schedule.ops[size_t(rank())].size() + 1);
  for (size_t st = 0; st < stages_.size(); ++st)
    for (int m = 0; m < schedule.micro_batches; ++m)
      if (plans[st].micro_batch.slot[size_t(m)] >= 0)
        posts[size_t(plans[st].micro_batch.free_after[size_t(m)] + 1)].emplace_back(int(st), m);
  return posts;
}

template <class T>
LossSums Runner<T>::run(const Schedule& schedule, const std::vector<CellBufferPlan>& plans, const Posts& posts,
                        ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n, std::uint64_t step,
                        bool training) {
  require(n >= 1 && n <= options_.max_batch,
          fmt::format("rank {}: a batch of {} samples does not fit the pipeline's buffers "
                      "(1..{} samples)",
                      rank(), n, options_.max_batch));
  state_.split = split_batch(n, schedule.micro_batches);
  state_.batch_inputs = inputs;
  state_.batch_targets = targets;
  state_.batch_size = n;
  state_.step = step;
  const std::int64_t in_features = layers_.front()->in_features();
  if (reads_inputs())
    require(std::int64_t(inputs.extent(0)) >= n && std::int64_t(inputs.extent(1)) == in_features,
            fmt::format("rank {}: inputs are {}x{}, expected at least {}x{}", rank(), inputs.extent(0),
                        inputs.extent(1), n, in_features));
  if (computes_loss() && state_.predict_logits.extent(0) == 0)
    require(targets.size() >= n,
            fmt::format("rank {}: {} targets for a batch of {} samples", rank(), targets.size(), n));
  state_.final.assign(layers_.size(), false);
  state_.announced = int(layers_.size());
  for (size_t st = 0; st < stages_.size(); ++st) stages_[st]->begin(plans[st]);
  (void)training;
  try {
    return run_posted(schedule.ops[size_t(rank())], posts);
  } catch (...) {
    abandon();  // nothing posted may complete into these buffers later
    throw;
  }
}

template <class T>
void Runner<T>::abandon() noexcept {
  for (auto& stage : stages_) stage->abandon();
}

template <class T>
LossSums Runner<T>::run_posted(const std::vector<Op>& ops, const Posts& posts) {
  LossSums sums;
  for (const auto& [st, m] : posts[0]) stages_[size_t(st)]->post_receives(m);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    Stage<T>& stage = *stages_[size_t(local_of_stage_[size_t(op.stage)])];
    switch (op.kind) {
      case OpKind::Forward: stage.forward(op.micro_batch, true, sums); break;
      case OpKind::Recompute: stage.forward(op.micro_batch, false, sums); break;
      case OpKind::Backward: stage.backward(op.micro_batch, false); break;
      case OpKind::BackwardInput: stage.backward(op.micro_batch, true); break;
      case OpKind::BackwardWeights: stage.backward_weights(op.micro_batch, op.count); break;
      case OpKind::BatchWeights: stage.batch_weights(op.micro_batch); break;
    }
    for (const auto& [st, m] : posts[i + 1]) stages_[size_t(st)]->post_receives(m);
  }
  const Tracer::Scope wait(state_.tracer, EventKind::Wait, -1);
  for (auto& stage : stages_) stage->wait_sends();
  for (auto& stage : stages_) sums += stage->take_loss_sums();  // the one fence for the loss sums
  return sums;
}

template <class T>
LossSums Runner<T>::train_step(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n,
                               std::uint64_t step, const BatchPlacement& placement) {
  require(n >= options_.micro_batches,
          fmt::format("a training batch of {} samples cannot be split into {} micro-batches", n,
                      options_.micro_batches));
  state_.placement = placement;
  state_.training = true;
  begin_gradients();
  struct Reset {
    StepState<T>& state;
    ~Reset() {
      state.placement = BatchPlacement{};
      state.training = false;
    }
  } reset{state_};
  return run(train_schedule_, train_plans_, train_posts_, inputs, targets, n, step, true);
}

template <class T>
LossSums Runner<T>::forward_only_run(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n) {
  const int M = int(std::min<std::int64_t>(options_.micro_batches, n));
  const Schedule schedule = forward_only(train_schedule_, M);
  std::vector<CellBufferPlan> plans;
  for (const auto& stage : stages_) plans.push_back(plan_buffers(schedule, stage->index()));
  return run(schedule, plans, receive_posts(schedule, plans), inputs, targets, n, state_.step, false);
}

template <class T>
LossSums Runner<T>::evaluate(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n) {
  return forward_only_run(inputs, targets, n);
}

template <class T>
void Runner<T>::predict(ConstMatrix<T> inputs, std::int64_t n, Matrix<T> logits) {
  const std::int64_t out_features = layers_.back()->out_features();
  if (computes_loss())
    require(std::int64_t(logits.extent(0)) >= n && std::int64_t(logits.extent(1)) == out_features,
            fmt::format("rank {}: logits are {}x{}, expected at least {}x{}", rank(), logits.extent(0),
                        logits.extent(1), n, out_features));
  state_.predict_logits = computes_loss() ? logits : Matrix<T>();
  struct Reset {
    Matrix<T>& view;
    ~Reset() { view = Matrix<T>(); }
  } reset{state_.predict_logits};
  forward_only_run(inputs, Targets<T>(), n);
}

#define GPIPE_INSTANTIATE(T) template class Runner<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

#include "gpipe/train/pipeline.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>

#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/finite.hpp"
#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/gemm.hpp"
#include "gpipe/kernels/vendor.hpp"
#include "gpipe/train/memory.hpp"
#include "gpipe/model/cost.hpp"
#include "gpipe/optim/clip.hpp"
#include "gpipe/pipeline/schedule_file.hpp"
#include "gpipe/pipeline/wait.hpp"
#include "gpipe/pipeline/wire_format.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {

namespace {
// The grid of `deck` on the ranks of `comm`, validated before any communication.
GridShape checked_grid(const Deck& deck, MPI_Comm comm) {
  check_same_deck(deck, comm);  // a rank with another deck would split, partition and train otherwise
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  return grid_shape(deck, ranks);
}

// Tied embeddings: dE + dW (in that order) into dE, and also into dW when
// `both`; with `into_w` only dW gets it (the head's cell, dE a copy from
// the embedding's cell). A free function: nvcc rejects a KOKKOS_LAMBDA in
// a private member.
template <class T>
void add_tied(const ExecSpace& space, Kokkos::View<T*, MemSpace> de, Kokkos::View<T*, MemSpace> dw, bool both,
              bool into_w = false) {
  Kokkos::parallel_for(
      "gpipe::Pipeline::tie_gradients", Kokkos::RangePolicy<ExecSpace>(space, 0, de.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T sum = de(i) + dw(i);
        if (both || !into_w) de(i) = sum;
        if (both || into_w) dw(i) = sum;
      });
}
}  // namespace

template <class T>
Pipeline<T>::Pipeline(const Deck& deck, MPI_Comm comm)
    : deck_(deck), shape_(checked_grid(deck, comm)), comm_(comm), grid_(comm_.get(), shape_) {
  const int K = shape_.cells, D = shape_.replicas, M = deck.training.micro_batches;
  const int L = int(deck.model.layers.size());
  // Rank-local checks, agreed before the pipeline's first collective: a
  // schedule file (or deck setting) that one rank cannot read or rejects
  // stops every rank with that rank's error instead of leaving the others
  // waiting in layer_costs or the cell's communicator set-up.
  Schedule schedule;
  gpipe::agreed(comm_.get(), [&] {
    kernels::select(kernels::parse_choice(deck.kernels, deck.path + ": kernels"));  // before any timing
    set_wait_policy(deck.pipeline.wait_sleep ? WaitPolicy::Sleep : WaitPolicy::Spin);  // pipeline.wait
    (void)kernels::selected();  // InputError here for an invalid GPIPE_KERNELS
    (void)kernels::selected_bf16_route();  // and for an invalid GPIPE_BF16_ROUTE
    precision_ = precision_policy(deck.precision, deck.path + ": precision");
    if (precision_.master_bytes() != int(sizeof(T)))  // with_scalar picks T from the policy
      throw InputError(fmt::format("{}: precision: {} keeps {} master weights; this is a {}-byte pipeline", deck.path,
                                   deck.precision, name(precision_.master), sizeof(T)));
    kernels::set_compute_format(precision_.compute);  // the seam rounds operands (bf16 / fp16); before any timing
    // pipeline.tf32: before any layer (cuDNN fixes its math type when a
    // Conv2d is made); where nothing has TF32, a note once per process.
    kernels::set_tf32(deck.pipeline.tf32);
    if (const std::string note = kernels::tf32_note(); !note.empty()) {
      int rank = 0;
      MPI_Comm_rank(comm, &rank);
      if (rank == 0) spdlog::info("{}", note);
    }
    if (precision_.loss_scaling)
      scaler_ = LossScaler(deck.training.loss_scale, deck.training.loss_scale_growth_interval,
                           deck.training.loss_scale_growth, deck.training.loss_scale_backoff);
    // The schedule (pipeline.schedule_file, else the generator), checked on
    // every rank before any traffic, naming the file and its first bad op.
    schedule = deck_schedule(deck, K);
    check_message_tags(comm_.get(), M, schedule.stages);
    if (schedule.stages > L) check_stage_count(deck, schedule.stages, K);  // throws: more stages than layers
  });
  // Every rank runs the op lists of one schedule: a schedule file that
  // differs between ranks (a node-local copy) would deadlock the first step.
  check_same_schedule(schedule, deck, comm_.get());
  const int S = schedule.stages;  // K x chunks (interleaved_1f1b), 2K (zb_v, dualpipe_v), or the file's
  const std::int64_t shard = largest_shard(deck, D);
  const std::int64_t micro = largest_micro_batch(deck, D);
  // "explicit" reports flops; "time" is measured on rank 0 and broadcast.
  const std::string mode = deck.pipeline.balance == "explicit" ? "flops" : deck.pipeline.balance;
  costs_ = layer_costs<T>(deck.model, mode, micro, comm_.get());
  gpipe::agreed(comm_.get(), [&] {
    partition_ = deck_partition(deck, S, costs_, K);  // by stage
    tied_ = tied_layers(deck.model);  // throws InputError (the same on every rank) for a bad tie
    if (deck.pipeline.memory_budget > 0)  // the same verdict on every rank, from the deck
      check_memory_budget(cell_memory(deck, partition_, D, K), deck.pipeline.memory_budget, shape_);
  });
  CellOptions options;
  options.max_batch = shard;
  options.micro_batches = M;
  options.remat = deck.pipeline.remat;
  options.schedule = deck.pipeline.schedule;
  options.chunks = deck.pipeline.chunks;
  options.custom_schedule = schedule;
  options.seed = deck.seed;
  options.wire = precision_.wire;
  options.activation_storage16 = deck.pipeline.activation_storage16;
  if (deck.pipeline.link.enabled())
    options.link = LinkModel::from_deck(deck.pipeline.link.latency_us, deck.pipeline.link.bandwidth_gbps);
  cell_ = std::make_unique<Cell<T>>(deck.model, partition_, grid_.pipeline(), options);
  optimizer_ = make_optimizer<T>(deck.optimizer, std::int64_t(cell_->parameters().extent(0)));
  optimizer_->set_execution_space(options.space);
  if (tied_.tied()) share_tied_weights();
  run_id_ = new_run_id(comm_.get());
  MPI_Barrier(comm_.get());
  tracer_ = Tracer(Tracer::steady_ns());
  cell_->set_tracer(&tracer_);
  tracer_.set_execution_space(options.space);
  if (D > 1) {
    reducer_ = std::make_unique<GradientReducer<T>>(
        grid_.replica_group(), cell_->gradients(), cell_->parameter_offsets(),
        deck.parallel.bucket_kib * 1024, deck.parallel.deterministic_reduction);
    reducer_->set_tracer(&tracer_);
    reducer_->set_link(options.link);
    reducer_->set_execution_space(options.space);
    GradientReducer<T>* reducer = reducer_.get();
    cell_->set_gradient_ready([reducer](int layer) { reducer->layer_ready(layer); });
  }
  if (cell_->reads_inputs()) {
    batch_inputs_ = Matrix<T>("gpipe::Pipeline::batch_inputs", shard, deck.model.input_features);
    batch_inputs_host_ = Kokkos::create_mirror_view(batch_inputs_);
  }
  regression_ = deck.model.loss.regression();
  outputs_ = deck.model.classes();
  labels_per_sample_ = std::max<std::int64_t>(deck.model.labels_per_sample(), 1);
  if (cell_->computes_loss() && !regression_) {
    batch_labels_ = LabelVector("gpipe::Pipeline::batch_labels", shard * labels_per_sample_);
    batch_labels_host_ = Kokkos::create_mirror_view(batch_labels_);
  }
  if (cell_->computes_loss() && regression_) {
    batch_targets_ = Matrix<T>("gpipe::Pipeline::batch_targets", shard, outputs_);
    batch_targets_host_ = Kokkos::create_mirror_view(batch_targets_);
  }
}

template <class T>
Targets<T> Pipeline<T>::staged_targets() const {
  if (regression_) return Targets<T>(ConstMatrix<T>(batch_targets_));
  return Targets<T>(ConstLabelVector(batch_labels_), labels_per_sample_);
}

template <class T>
void Pipeline<T>::set_normalization(const NormalizationStats& stats) {
  NormalizationStats s = stats;
  double in[3] = {s.input_scale, s.input_mean, s.input_std};
  const int first = shape_.rank_of(0, cell_->first_rank());  // where stage 0 reads the inputs
  MPI_Bcast(in, 3, MPI_DOUBLE, first, comm_.get());
  s.input_scale = in[0];
  s.input_mean = in[1];
  s.input_std = in[2];
  for (auto* v : {&s.input_feature_mean, &s.input_feature_std}) {  // from the first cell
    long long size = (long long)v->size();
    MPI_Bcast(&size, 1, MPI_LONG_LONG, first, comm_.get());
    v->resize(size_t(size));
    if (size > 0)
      MPI_Bcast(v->data(), mpi_count(size, "the input normalization"), MPI_DOUBLE, first, comm_.get());
  }
  s.target_mean = from_last(s.target_mean);
  s.target_std = from_last(s.target_std);
  normalization_ = s;
}

template <class T>
std::vector<double> Pipeline<T>::from_last(std::vector<double> values) const {
  const int root = shape_.rank_of(0, cell_->last_rank());
  long long size = (long long)values.size();
  MPI_Bcast(&size, 1, MPI_LONG_LONG, root, comm_.get());
  values.resize(size_t(size));
  if (size > 0) MPI_Bcast(values.data(), mpi_count(size, "from_last"), MPI_DOUBLE, root, comm_.get());
  return values;
}

bool Evaluation::finite() const { return std::isfinite(loss); }

template <class T>
std::int64_t Pipeline<T>::steps_per_epoch(std::int64_t samples) const {
  return steps_in_epoch(samples, 0, deck_.training.batch_size, min_step_samples());
}

template <class T>
double Pipeline<T>::next_learning_rate() const {
  if (total_samples_ > 0)  // progress in samples; a warm-up step covers one batch
    return learning_rate(deck_.optimizer, samples_done(), total_samples_, deck_.training.batch_size);
  if (deck_.optimizer.schedule == "cosine" && total_steps_ <= 0)
    throw InputError(
        "optimizer.schedule: cosine decays over the run's total step count, which is not set: "
        "call set_total_steps (C API: gpipe_set_total_steps) before the first step");
  return learning_rate(deck_.optimizer, steps_done_, total_steps_);
}

template <class T>
double Pipeline<T>::from_last(double value) const {
  waited_bcast(&value, 1, MPI_DOUBLE, shape_.rank_of(0, cell_->last_rank()), comm_.get());
  return value;
}

template <class T>
LossSums Pipeline<T>::sum_over_replicas(LossSums sums) const {
  if (shape_.replicas == 1 || !cell_->computes_loss()) return sums;
  // Exact sums: an integer sum of their words (the same in any order), then
  // rounded once (loss/exact_sum.hpp); a replica with an empty shard holds
  // zeros.
  if (regression_) sums.moments_exact.resize(size_t(4 * outputs_));
  std::vector<std::int64_t> words;
  auto pack = [&words](const ExactSum& s) { words.insert(words.end(), s.words().begin(), s.words().end()); };
  pack(sums.loss_exact);
  for (const auto& m : sums.moments_exact) pack(m);
  words.push_back(sums.correct);
  MPI_Allreduce(MPI_IN_PLACE, words.data(), mpi_count(std::int64_t(words.size()), "the replicas' loss sums"),
                MPI_INT64_T, MPI_SUM, grid_.replica_group());
  sums.loss_exact = ExactSum(words.data());
  for (size_t k = 0; k < sums.moments_exact.size(); ++k)
    sums.moments_exact[k] = ExactSum(words.data() + (k + 1) * kExactWords);
  sums.correct = words.back();
  sums.round();
  return sums;
}

template <class T>
void Pipeline<T>::agree(const std::string& error, const std::string& what) const {
  (void)what;  // every rank reports the first failing rank's own message
  throw_agreed(gpipe::agree(error.empty() ? 0 : 1, error, comm_.get()));
}

template <class T>
MicroBatch Pipeline<T>::stage_batch(const float* inputs, std::int64_t features,
                                    const std::int32_t* labels, const float* targets,
                                    const std::int64_t* order, std::int64_t n, bool normalize) {
  require(n >= 1 && n <= deck_.training.batch_size,
          fmt::format("a batch of {} samples: expected 1 to training.batch_size = {}", n,
                      deck_.training.batch_size));
  const MicroBatch shard = shard_of(n, shape_.replicas, grid_.replica());
  auto row = [&](std::int64_t i) { return order ? order[shard.offset + i] : shard.offset + i; };
  if (cell_->reads_inputs()) {
    const auto f = features;
    require(f == deck_.model.input_features,
            fmt::format("samples have {} features but model.input is {}", f, deck_.model.input_features));
    const auto& z = normalization_;
    const bool per_feature = !z.input_feature_mean.empty();
    require(!normalize || !per_feature || std::int64_t(z.input_feature_mean.size()) == f,
            fmt::format("the normalization has {} features but samples have {}",
                        z.input_feature_mean.size(), f));
    for (std::int64_t i = 0; i < shard.size; ++i) {
      const float* x = inputs + row(i) * f;
      if (normalize && per_feature)
        for (std::int64_t j = 0; j < f; ++j)
          batch_inputs_host_(i, j) =
              T((double(x[j]) * z.input_scale - z.input_feature_mean[size_t(j)]) / z.input_feature_std[size_t(j)]);
      else if (normalize)
        for (std::int64_t j = 0; j < f; ++j)
          batch_inputs_host_(i, j) = T((double(x[j]) * z.input_scale - z.input_mean) / z.input_std);
      else
        for (std::int64_t j = 0; j < f; ++j) batch_inputs_host_(i, j) = T(x[j]);
    }
    Kokkos::deep_copy(cell_->execution_space(), batch_inputs_, batch_inputs_host_);
  }
  if (cell_->computes_loss() && labels && !regression_) {
    const std::int64_t w = labels_per_sample_;  // T labels per sample for token data
    for (std::int64_t i = 0; i < shard.size; ++i)
      for (std::int64_t t = 0; t < w; ++t) batch_labels_host_(i * w + t) = labels[row(i) * w + t];
    Kokkos::deep_copy(cell_->execution_space(), batch_labels_, batch_labels_host_);
  }
  if (cell_->computes_loss() && targets && regression_) {
    const auto p = outputs_;
    for (std::int64_t i = 0; i < shard.size; ++i)
      for (std::int64_t j = 0; j < p; ++j) batch_targets_host_(i, j) = T(targets[row(i) * p + j]);
    Kokkos::deep_copy(cell_->execution_space(), batch_targets_, batch_targets_host_);
  }
  // The host buffers are refilled by the next call: the copies must be done.
  compat::fence(cell_->execution_space(), "gpipe::Pipeline::stage_batch");
  return shard;
}

template <class T>
void Pipeline<T>::check_usable() const {
  if (!poisoned_.empty())
    throw StateError("the pipeline is unusable: an earlier call failed after communication had "
                     "started (" + poisoned_ + "); destroy it and create a new one");
}

template <class T>
void Pipeline<T>::agree_on_batch(const std::string& error, std::int64_t n, const char* what) const {
  std::int64_t v[3] = {error.empty() ? 0 : 1, n, -n};
  exact_allreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_MAX, comm_.get());
  if (v[0] != 0)
    throw InputError(!error.empty() ? error
                                    : fmt::format("{}: another rank rejected its arguments (its "
                                                  "error names the problem)",
                                                  what));
  if (v[1] != -v[2])
    throw InputError(fmt::format("{}: the ranks passed different sample counts (n = {} on rank "
                                 "{}; {} to {} across ranks): every rank must pass the same batch",
                                 what, n, comm_.rank(), -v[2], v[1]));
}

template <class T>
template <class Stage, class Run>
auto Pipeline<T>::agreed(std::int64_t n, const char* what, Stage&& stage, Run&& run) {
  check_usable();
  std::string error;
  MicroBatch shard;
  try {
    shard = stage();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_batch(error, n, what);
  try {
    return run(shard);
  } catch (const std::exception& e) {
    poisoned_ = e.what();
    throw;
  }
}

template <class T>
void Pipeline<T>::check_train_batch(std::int64_t n) const {
  const int D = shape_.replicas, M = deck_.training.micro_batches;
  if (D == 1)
    require(n >= M, fmt::format("a training batch of {} samples cannot be split into {} "
                                "micro-batches", n, M));
  else
    require(n / D >= M, fmt::format("a training batch of {} samples on {} replicas: every shard "
                                    "needs at least training.micro_batches = {} samples (n >= {})",
                                    n, D, M, std::int64_t(D) * M));
  next_learning_rate();  // throws for a cosine schedule without a total
}

template <class T>
LossSums Pipeline<T>::step(const Dataset& data, const std::vector<std::int64_t>& order,
                           std::int64_t begin, std::int64_t n) {
  return agreed(
      n, "step",
      [&] {
        check_train_batch(n);
        return stage_batch(data.inputs.data(), data.features, data.labels.data(), data.targets.data(),
                           order.data() + begin, n);
      },
      [&](const MicroBatch& shard) { return step_staged(n, shard); });
}

template <class T>
LossSums Pipeline<T>::step(const float* inputs, const std::int32_t* labels, std::int64_t n) {
  return agreed(
      n, "step",
      [&] {
        if (regression_)
          throw InputError(fmt::format("model.loss is {}: a training step needs float targets (n, {}), "
                                       "not class labels",
                                       deck_.model.loss.type, outputs_));
        check_train_batch(n);
        return stage_batch(inputs, deck_.model.input_features, labels, nullptr, nullptr, n);
      },
      [&](const MicroBatch& shard) { return step_staged(n, shard); });
}

template <class T>
LossSums Pipeline<T>::step(const float* inputs, const float* targets, std::int64_t n) {
  return agreed(
      n, "step",
      [&] {
        if (!regression_)
          throw InputError("model.loss is softmax_cross_entropy: a training step needs integer class "
                           "labels, not float targets");
        check_train_batch(n);
        return stage_batch(inputs, deck_.model.input_features, nullptr, targets, nullptr, n);
      },
      [&](const MicroBatch& shard) { return step_staged(n, shard); });
}

template <class T>
LossSums Pipeline<T>::step_staged(std::int64_t n, const MicroBatch& shard) {
  const double lr = next_learning_rate();
  last_learning_rate_ = lr;
  const bool record = !deck_.trace.file.empty() && tracer_.wants(steps_done_, deck_.trace.every);
  tracer_.begin_step(steps_done_, record);
  {
    const Tracer::Scope zero(&tracer_, EventKind::Optimizer, -1);
    cell_->zero_gradients();
  }
  refresh_weight_copy();
  const double loss_scale = scaler_.scale();  // 1 unless fp16
  if (precision_.loss_scaling) cell_->set_loss_scale(loss_scale);
  const std::int64_t sent_before = boundary_bytes_sent();
  LossSums sums;
  {
    // The weights change only at the update below (prepacked GEMM operands;
    // a waiting stage packs this cell's ahead of their first product).
    const kernels::FrozenWeights frozen(cell_->parameters().data(),
                                        std::int64_t(cell_->parameters().span() * sizeof(T)));
    sums = cell_->train_step(batch_inputs_, staged_targets(), shard.size, std::uint64_t(steps_done_),
                             {shard.offset, n});
  }
  last_boundary_bytes_ = boundary_bytes_sent() - sent_before;
  if (inject_overflow_ && cell_->gradients().extent(0) > 0) {  // test hook: an overflow on this cell alone
    inject_overflow_ = false;
    const T inf = std::numeric_limits<T>::infinity();
    Kokkos::deep_copy(cell_->execution_space(), Kokkos::subview(cell_->gradients(), 0), inf);
    compat::fence(cell_->execution_space(), "gpipe::Pipeline::inject_gradient_overflow");
  }
  if (reducer_) {
    const Tracer::Scope wait(&tracer_, EventKind::ReduceWait, -1);
    reducer_->finish();
  }
  if (tied_.tied()) tie_gradients();
  last_step_applied_ = check_finite(sums);  // on the reduced gradients
  if (last_step_applied_ && precision_.loss_scaling)  // unscale: the fp32 gradients of the unscaled loss
    scale_in_place<T>(cell_->execution_space(), cell_->gradients(), T(1.0 / loss_scale));
  if (last_step_applied_ && deck_.optimizer.clip_norm > 0) clip_gradients();
  if (last_step_applied_) {
    const Tracer::Scope update(&tracer_, EventKind::Optimizer, -1);
    optimizer_->step(cell_->parameters(), value_gradients(), lr);
  }
  tracer_.end_step(cell_->activation_bytes());
  ++steps_done_;
  sums = sum_over_replicas(sums);
#ifndef NDEBUG
  if (shape_.replicas > 1)
    require(replicas_identical(),
            fmt::format("step {}: the replicas' weights differ after the gradient reduction", steps_done_));
#endif
  return sums;
}

template <class T>
std::vector<T> Pipeline<T>::without_tied_head(std::vector<T> values) const {
  const int h = tied_.tied() ? local_layer(tied_.head) : -1;
  if (h < 0 || cell_->shares_tied_weight()) return values;  // untied, another cell's, or held once already
  const auto offsets = cell_->value_offsets();
  values.erase(values.begin() + offsets[size_t(h)], values.begin() + offsets[size_t(h) + 1]);
  return values;
}

template <class T>
std::vector<T> Pipeline<T>::with_tied_head(std::vector<T> values) const {
  const int h = tied_.tied() ? local_layer(tied_.head) : -1;
  if (h < 0 || cell_->shares_tied_weight()) return values;
  const auto offsets = cell_->value_offsets();  // zeros until share_tied_weights copies E's
  values.insert(values.begin() + offsets[size_t(h)], size_t(offsets[size_t(h) + 1] - offsets[size_t(h)]), T(0));
  return values;
}

template <class T>
int Pipeline<T>::local_layer(int layer) const {
  return cell_->local_layer(layer);
}

template <class T>
int Pipeline<T>::cell_of(int layer) const {
  return cell_->rank_of_layer(layer);
}

template <class T>
Kokkos::View<T*, MemSpace> Pipeline<T>::layer_slice(const Vector<T>& values, int layer) const {
  // The gradient layout, or the values' (parameters, optimizer state) when
  // `values` is that long: the two differ only by a shared head's slot.
  const bool by_value = values.extent(0) == cell_->parameters().extent(0);
  const auto offsets = by_value ? cell_->value_offsets() : cell_->parameter_offsets();
  const int l = local_layer(layer);
  return Kokkos::subview(values, std::make_pair(offsets[size_t(l)], offsets[size_t(l) + 1]));
}

template <class T>
Vector<T> Pipeline<T>::value_gradients() const {
  // With a shared head (Runner::shares_tied_weight) the gradient buffer is
  // the values' layout followed by the head's slot: its prefix.
  const Vector<T> g = cell_->gradients();
  const std::int64_t n = std::int64_t(cell_->parameters().extent(0));
  if (std::int64_t(g.extent(0)) == n) return g;
  return Kokkos::subview(g, std::make_pair(std::int64_t(0), n));
}

template <class T>
void Pipeline<T>::exchange_tied(const Kokkos::View<T*, MemSpace>& mine, int peer_cell) {
  // The two tied cells of one replica swap their V x d slices (the same
  // size: checked by tied_layers) on the replica's pipeline communicator,
  // into tied_peer_. The buffers are allocated once, at the first exchange
  // (share_tied_weights at construction); on a host memory space the host
  // views are the device views themselves (no copy).
  const std::int64_t n = std::int64_t(mine.extent(0));
  if (std::int64_t(tied_peer_.extent(0)) != n) {
    tied_peer_ = Kokkos::View<T*, MemSpace>("gpipe::Pipeline::tied_peer", n);
    tied_peer_host_ = Kokkos::create_mirror_view(tied_peer_);
  }
  const ExecSpace& space = cell_->execution_space();
  const T* out = mine.data();
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {  // a device space
    if (std::int64_t(tied_send_host_.extent(0)) != n)
      tied_send_host_ = typename Kokkos::View<T*, MemSpace>::HostMirror(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Pipeline::tied_send"), n);
    Kokkos::deep_copy(space, tied_send_host_, mine);
    out = tied_send_host_.data();
  }
  compat::fence(space, "gpipe::Pipeline::exchange_tied");  // before MPI reads host
  const int count = mpi_count(n, "the tied embedding (V x d)");
  MPI_Sendrecv(out, count, mpi_type<T>(), peer_cell, kTieTag, tied_peer_host_.data(), count, mpi_type<T>(),
               peer_cell, kTieTag, grid_.pipeline(), MPI_STATUS_IGNORE);
  Kokkos::deep_copy(space, tied_peer_, tied_peer_host_);  // no copy on a host memory space
}

template <class T>
std::vector<Vector<T>> Pipeline<T>::tied_value_buffers() const {
  std::vector<Vector<T>> out{cell_->parameters()};
  for (const auto& [name, values] : optimizer_->state()) out.push_back(values);
  return out;
}

template <class T>
void Pipeline<T>::share_tied_weights() {
  // One matrix on one rank (Runner::shares_tied_weight): nothing to copy.
  const int e = local_layer(tied_.embedding), h = local_layer(tied_.head);
  if (e < 0 && h < 0) return;
  if (cell_->shares_tied_weight()) return;
  // Two cells: the head's cell takes E's values and optimizer state (equal
  // from then on: the same summed gradient, an element-wise optimizer).
  const ExecSpace& space = cell_->execution_space();
  for (const Vector<T>& buffer : tied_value_buffers()) {
    const auto mine = layer_slice(buffer, e >= 0 ? tied_.embedding : tied_.head);
    exchange_tied(mine, cell_of(e >= 0 ? tied_.head : tied_.embedding));
    if (h >= 0) Kokkos::deep_copy(space, mine, tied_peer_);  // the embedding keeps its values; the head takes them
  }
  compat::fence(space, "gpipe::Pipeline::share_tied_weights");
}

template <class T>
void Pipeline<T>::tie_gradients() {
  const int e = local_layer(tied_.embedding), h = local_layer(tied_.head);
  if (e < 0 && h < 0) return;
  const Tracer::Scope tie(&tracer_, EventKind::ReduceWait, -1);
  const Vector<T> g = cell_->gradients();
  const ExecSpace& space = cell_->execution_space();
  if (cell_->shares_tied_weight()) {  // one matrix: dE + dW into dE (the head's slot is not read again)
    add_tied<T>(space, layer_slice(g, tied_.embedding), layer_slice(g, tied_.head), false);
    return;
  }
  const auto mine = layer_slice(g, e >= 0 ? tied_.embedding : tied_.head);
  exchange_tied(mine, cell_of(e >= 0 ? tied_.head : tied_.embedding));
  if (e >= 0) add_tied<T>(space, mine, tied_peer_, false);
  else add_tied<T>(space, tied_peer_, mine, false, true);
  compat::fence(space, "gpipe::Pipeline::tie_gradients");
}

template <class T>
void Pipeline<T>::clip_gradients() {
  // optim/clip.hpp: per-layer squared norms, gathered over the pipeline in
  // layer order (the replicas hold the same reduced gradients), one factor.
  const Tracer::Scope clip(&tracer_, EventKind::Optimizer, -1);
  const ExecSpace& space = cell_->execution_space();
  const Vector<T> g = cell_->gradients();
  auto squares = segment_squared_norms<T>(space, g, cell_->parameter_offsets());
  // A tied weight is one parameter: counted once, in the embedding's layer.
  if (tied_.tied() && local_layer(tied_.head) >= 0) squares[size_t(local_layer(tied_.head))] = 0;
  // Summed in global layer order whatever the stage map: each layer's square
  // is nonzero on one rank only, so the sum over ranks is exact, and the
  // layers are then added in model order (global_norm's order for one stage per rank).
  std::vector<double> by_layer(deck_.model.layers.size(), 0.0);
  for (size_t l = 0; l < squares.size(); ++l) by_layer[size_t(cell_->global_layer(int(l)))] = squares[l];
  MPI_Allreduce(MPI_IN_PLACE, by_layer.data(), mpi_count(std::int64_t(by_layer.size()), "clip_norm: the layers"),
                MPI_DOUBLE, MPI_SUM, grid_.pipeline());
  double sum = 0;
  for (double v : by_layer) sum += v;
  last_gradient_norm_ = std::sqrt(sum);
  const double factor = clip_factor(last_gradient_norm_, deck_.optimizer.clip_norm);
  if (factor < 1) scale_in_place<T>(space, g, T(factor));
}

template <class T>
int Pipeline<T>::first_nonfinite_layer(const Vector<T>& values) const {
  const std::int64_t at = first_nonfinite(values, cell_->execution_space());
  if (at < 0) return -1;
  // The gradient layout, or the values' for parameters and optimizer state.
  const bool by_value = values.extent(0) == cell_->parameters().extent(0);
  const auto offsets = by_value ? cell_->value_offsets() : cell_->parameter_offsets();
  for (std::size_t l = 0; l + 1 < offsets.size(); ++l)
    if (at < offsets[l + 1]) return cell_->global_layer(int(l));
  return cell_->global_layer(int(offsets.size()) - 2);
}

template <class T>
std::string Pipeline<T>::where_layer(int layer) const {
  return fmt::format("layer {} ({}) in cell {}", layer, deck_.model.layers[size_t(layer)].type, cell_of(layer));
}

template <class T>
bool Pipeline<T>::check_finite(const LossSums& sums) {
  const NonFinite mode = deck_.training.nonfinite;
  last_step_finite_ = !cell_->computes_loss() || std::isfinite(sums.loss);
  if (mode == NonFinite::Ignore && !precision_.loss_scaling) return true;  // reported by fit() from the loss
  // One Allreduce (MIN) of {first layer with a non-finite gradient or INT_MAX,
  // 1 if the loss is finite}: every rank takes the same decision.
  int flags[2] = {INT_MAX, last_step_finite_ ? 1 : 0};
  const int layer = first_nonfinite_layer(cell_->gradients());
  if (layer >= 0) flags[0] = layer;
  exact_allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MIN, comm_.get());
  last_step_finite_ = flags[0] == INT_MAX && flags[1] == 1;
  if (precision_.loss_scaling && flags[1] == 1) {  // fp16: a non-finite gradient of a finite loss is an overflow
    last_step_finite_ = true;                      // (agreed above: every rank skips the same step)
    if (scaler_.update(flags[0] != INT_MAX)) return true;
    ++skipped_steps_;
    return false;
  }
  if (last_step_finite_) return true;
  if (mode == NonFinite::Ignore) return true;
  if (mode == NonFinite::SkipStep) {
    ++skipped_steps_;
    return false;
  }
  throw AgreedError<PipelineError>(fmt::format(
      "step {}: non-finite values (training.nonfinite: abort): the loss is {}; {}; the parameters "
      "are those before this step",
      steps_done_ + 1, flags[1] ? "finite" : "not finite",
      flags[0] == INT_MAX ? "every gradient is finite"
                          : "the first layer with a non-finite gradient is " + where_layer(flags[0])));
}

template <class T>
void Pipeline<T>::predict_chunk(const float* inputs, std::int64_t n, T* result) {
  const auto out = agreed(
      n, "predict",
      [&] { return stage_batch(inputs, deck_.model.input_features, nullptr, nullptr, nullptr, n, true); },
      [&](const MicroBatch& shard) { return predict_staged(n, shard); });
  std::copy(out.begin(), out.end(), result);
}

template <class T>
std::vector<T> Pipeline<T>::predict_staged(std::int64_t n, const MicroBatch& shard) {
  const std::int64_t classes = deck_.model.classes();
  std::vector<T> out(static_cast<size_t>(n * classes));  // n <= batch_size
  Matrix<T> logits;
  if (cell_->computes_loss()) logits = Matrix<T>("gpipe::Pipeline::predict", shard.size, classes);
  refresh_weight_copy();
  if (shard.size > 0) cell_->predict(batch_inputs_, shard.size, logits);
  if (cell_->computes_loss()) {
    auto h = Kokkos::create_mirror_view(logits);
    Kokkos::deep_copy(cell_->execution_space(), h, logits);
    compat::fence(cell_->execution_space(), "gpipe::Pipeline::predict");
    std::copy(h.data(), h.data() + h.span(), out.begin() + shard.offset * classes);
    if (shape_.replicas > 1) {  // every replica's shard, in replica order
      std::vector<int> counts, displs;
      for (int r = 0; r < shape_.replicas; ++r) {
        const MicroBatch s = shard_of(n, shape_.replicas, r);
        counts.push_back(mpi_count(s.size * classes, "predict: a replica's outputs"));
        displs.push_back(mpi_count(s.offset * classes, "predict: the outputs before a replica's"));
      }
      MPI_Allgatherv(MPI_IN_PLACE, 0, mpi_type<T>(), out.data(), counts.data(), displs.data(),
                     mpi_type<T>(), grid_.replica_group());
    }
  }
  MPI_Bcast(out.data(), mpi_count(std::int64_t(out.size()), "predict: the outputs"), mpi_type<T>(), shape_.rank_of(0, cell_->last_rank()), comm_.get());
  const auto& z = normalization_;
  if (regression_ && std::int64_t(z.target_mean.size()) == classes)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < classes; ++j) {
        T& v = out[size_t(i * classes + j)];
        v = T(double(v) * z.target_std[size_t(j)] + z.target_mean[size_t(j)]);
      }
  return out;
}

template <class T>
std::vector<T> Pipeline<T>::predict(const float* inputs, std::int64_t n) {
  check_usable();
  // Every rank agrees on n first, so all take the same number of chunks.
  agree_on_batch(n >= 1 ? "" : fmt::format("predict: n = {} samples, expected at least 1", n), n,
                 "predict");
  const std::int64_t chunk = deck_.training.batch_size, classes = deck_.model.classes();
  std::vector<T> out(static_cast<size_t>(n * classes));
  for (std::int64_t begin = 0; begin < n; begin += chunk)
    predict_chunk(inputs ? inputs + begin * deck_.model.input_features : nullptr, std::min(chunk, n - begin),
                  out.data() + begin * classes);
  return out;
}

template <class T>
std::int64_t Pipeline<T>::total_parameters() const {
  std::int64_t total = 0;
  const auto shapes = model_shapes(deck_.model);
  for (size_t l = 0; l < shapes.size(); ++l)
    if (int(l) != tied_.head) total += shapes[l].parameter_count();  // a tied head's weight is the embedding's
  return total;
}

template <class T>
Evaluation Pipeline<T>::evaluate(const Dataset& data) {
  check_usable();
  const auto N = deck_.training.batch_size;
  std::vector<std::int64_t> order = epoch_order(data.samples, 0, 0, false);
  LossSums total;
  refresh_weight_copy();
  for (std::int64_t begin = 0; begin < data.samples; begin += N) {
    const auto n = std::min(N, data.samples - begin);
    const MicroBatch shard = stage_batch(data.inputs.data(), data.features, data.labels.data(),
                                         data.targets.data(), order.data() + begin, n);
    if (shard.size == 0) continue;  // fewer samples than replicas
    total += cell_->evaluate(batch_inputs_, staged_targets(), shard.size);
  }
  total = sum_over_replicas(total);
  const double loss = from_last(total.loss), correct = from_last(double(total.correct));
  Evaluation e;
  e.loss = loss / double(data.samples);
  e.accuracy = regression_ ? 0.0 : correct / (double(data.samples) * double(labels_per_sample_));
  if (regression_)
    e.regression = regression_metrics(from_last(total.moments), data.samples, normalization_.target_std);
  return e;
}

template <class T>
void Pipeline<T>::save_checkpoint(const std::string& path) {
  check_usable();
  // Never a checkpoint from non-finite weights or optimizer state (e.g. Adam's
  // second moment overflowing float): agreed, so no rank writes.
  const auto state = optimizer_->state();
  int first[2] = {INT_MAX, INT_MAX};  // {layer, which: 0 parameters, 1 + i state i}
  for (int which = 0; which <= int(state.size()); ++which) {
    const int bad = first_nonfinite_layer(which == 0 ? cell_->parameters() : state[size_t(which - 1)].second);
    if (bad >= 0 && bad < first[0]) {
      first[0] = bad;
      first[1] = which;
    }
  }
  int global[2] = {first[0], first[1]};
  MPI_Allreduce(MPI_IN_PLACE, global, 1, MPI_2INT, MPI_MINLOC, comm_.get());
  if (global[0] != INT_MAX)
    throw AgreedError<PipelineError>(fmt::format(
        "{}: not written: the {} of {} are not finite", path,
        global[1] == 0 ? std::string("parameters")
                       : "optimizer state '" + state[size_t(global[1] - 1)].first + "'",
        where_layer(global[0])));
  CheckpointShard<T> shard;
  shard.layers = cell_->global_layers();
  const ExecSpace space = cell_->execution_space();
  auto host = [&space](const Vector<T>& v) {
    auto h = Kokkos::create_mirror_view(v);
    Kokkos::deep_copy(space, h, v);
    compat::fence(space, "gpipe::Pipeline::checkpoint_shard");
    return std::vector<T>(h.data(), h.data() + h.extent(0));
  };
  // A tied head's weight is the embedding's: stored once, in the
  // embedding's layer (io/checkpoint.hpp), whatever the layout.
  auto once = [&](const Vector<T>& v) { return without_tied_head(host(v)); };
  shard.parameters = once(cell_->parameters());
  shard.layer_state = host(cell_->state());
  for (const auto& [name, values] : optimizer_->state()) shard.optimizer_state.emplace_back(name, once(values));
  CheckpointInfo info;
  info.step = steps_done_;
  // The driver keeps the position; a caller stepping by itself has only steps.
  info.epoch = train_samples_ == 0 && steps_per_epoch_ > 0 ? steps_done_ / steps_per_epoch_
                                                           : position_.epoch;
  info.seed = deck_.seed;
  info.precision = sizeof(T) == 4 ? "float" : "double";  // the master format the values are stored in
  info.run_precision = precision_.name;
  if (precision_.loss_scaling) {
    info.loss_scale = scaler_.scale();
    info.loss_scale_good_steps = scaler_.good_steps();
    info.loss_scale_overflows = scaler_.overflows();
  }
  info.optimizer = deck_.optimizer.type;
  info.optimizer_steps = optimizer_->steps();
  info.deck = deck_.text;
  info.normalization = normalization_;
  info.run_id = run_id_;
  std::int64_t written = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  MPI_Bcast(&written, 1, MPI_INT64_T, 0, comm_.get());
  info.written_ns = written;
  info.batch_size = deck_.training.batch_size;
  info.train_samples = train_samples_;
  info.epoch_samples = position_.epoch_samples;
  info.epoch_loss_sum = position_.epoch_loss_sum;
  info.epoch_loss_samples = position_.loss_samples;
  info.epoch_metric_moments = position_.metric_moments;
  info.epoch_metric_samples = position_.metric_samples;
  info.epoch_skipped_steps = position_.skipped_steps;
  if (shape_.replicas == 1) return write_checkpoint(path, deck_.model, info, shard, grid_.pipeline());
  std::string error;
  if (grid_.replica() == 0) {  // one copy: the replicas are identical
    try {
      write_checkpoint(path, deck_.model, info, shard, grid_.pipeline());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error, path);
}

template <class T>
CheckpointInfo Pipeline<T>::load_checkpoint(const std::string& path) {
  check_usable();
  CheckpointShard<T> shard;
  shard.layers = cell_->global_layers();
  const auto state = optimizer_->state();
  for (const auto& [name, values] : state) shard.optimizer_state.emplace_back(name, std::vector<T>());
  CheckpointInfo info;
  if (shape_.replicas == 1) {
    info = read_checkpoint(path, deck_.model, deck_.optimizer.type, shard, grid_.pipeline());
  } else {  // every replica reads the one copy
    std::string error;
    try {
      info = read_checkpoint(path, deck_.model, deck_.optimizer.type, shard, grid_.pipeline());
    } catch (const std::exception& e) {
      error = e.what();
    }
    agree(error, path);
  }
  const ExecSpace space = cell_->execution_space();
  auto device = [&space](const std::vector<T>& from, const Vector<T>& to) {
    auto h = Kokkos::create_mirror_view(to);
    std::copy(from.begin(), from.end(), h.data());
    Kokkos::deep_copy(space, to, h);
    compat::fence(space, "gpipe::Pipeline::load_checkpoint");  // h is freed on return
  };
  device(with_tied_head(shard.parameters), cell_->parameters());
  device(shard.layer_state, cell_->state());
  for (size_t i = 0; i < state.size(); ++i) device(with_tied_head(shard.optimizer_state[i].second), state[i].second);
  optimizer_->set_steps(info.optimizer_steps);
  if (precision_.loss_scaling && info.loss_scale > 0)  // an fp16 run continues with its scaler
    scaler_.restore(info.loss_scale, info.loss_scale_good_steps, info.loss_scale_overflows);
  if (tied_.tied()) share_tied_weights();  // the head's cell takes E and its optimizer state
  steps_done_ = info.step;
  normalization_ = info.normalization;
  if (!info.run_id.empty()) run_id_ = info.run_id;  // the run continues
  position_ = DataPosition{info.epoch, info.epoch_samples, info.epoch_loss_sum,
                           std::max<std::int64_t>(info.epoch_loss_samples, 0),
                           info.epoch_metric_moments,
                           std::max<std::int64_t>(info.epoch_metric_samples, 0), info.epoch_skipped_steps};
  if (info.seed != deck_.seed && comm_.rank() == 0)
    spdlog::warn("{}: written with seed {}, the deck has seed {}: the data order and Dropout masks "
                 "differ from an uninterrupted run",
                 path, info.seed, deck_.seed);
  return info;
}

template <class T>
std::vector<T> Pipeline<T>::gather_parameters() const {
  const int K = shape_.cells;
  const MPI_Comm pipe = grid_.pipeline();
  auto values = Kokkos::create_mirror_view(cell_->parameters());
  Kokkos::deep_copy(cell_->execution_space(), values, cell_->parameters());
  compat::fence(cell_->execution_space(), "gpipe::Pipeline::gather_parameters");
  // The model's parameters, a tied head's weight once (the embedding's).
  const std::vector<T> host = without_tied_head(std::vector<T>(values.data(), values.data() + values.extent(0)));
  int local = int(host.size());
  std::vector<int> counts(static_cast<size_t>(K)), displs(static_cast<size_t>(K), 0);
  MPI_Gather(&local, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, pipe);
  std::vector<T> all;
  if (cell_->rank() == 0) {
    for (int k = 1; k < K; ++k) displs[size_t(k)] = displs[size_t(k) - 1] + counts[size_t(k) - 1];
    all.resize(size_t(displs.back() + counts.back()));
  }
  MPI_Gatherv(host.data(), local, mpi_type<T>(), all.data(), counts.data(), displs.data(),
              mpi_type<T>(), 0, pipe);
  if (cell_->rank() != 0 || cell_->schedule().stages == K) return all;  // one stage per rank: in layer order
  // Several stages per rank: rank k's buffer holds its stages' layers in
  // stage order; put every layer at its place in model order.
  const auto shapes = model_shapes(deck_.model);
  std::vector<std::int64_t> at(shapes.size() + 1, 0);  // [layer] offset in model order
  for (size_t l = 0; l < shapes.size(); ++l)
    at[l + 1] = at[l] + (int(l) == tied_.head ? 0 : shapes[l].parameter_count());
  std::vector<T> ordered(all.size());
  const Schedule& schedule = cell_->schedule();
  for (int k = 0; k < K; ++k) {
    std::int64_t from = displs[size_t(k)];
    for (int s : stages_of_rank(schedule, k))
      for (int l = partition_.first_layer(s); l < partition_.first_layer(s) + partition_.counts[size_t(s)]; ++l) {
        const std::int64_t size = at[size_t(l) + 1] - at[size_t(l)];
        std::copy(all.begin() + from, all.begin() + from + size, ordered.begin() + at[size_t(l)]);
        from += size;
      }
  }
  return ordered;
}

template <class T>
std::vector<std::int64_t> Pipeline<T>::gather_activation_bytes() const {
  std::vector<std::int64_t> out(static_cast<size_t>(shape_.cells));
  const std::int64_t mine = cell_->activation_bytes();
  MPI_Allgather(&mine, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, grid_.pipeline());
  return out;
}

template <class T>
void Pipeline<T>::refresh_weight_copy() {
  if constexpr (std::is_same_v<T, float>)
    if (precision_.reduced())
      weight_copy_.refresh(cell_->execution_space(), cell_->parameters().data(),
                           std::int64_t(cell_->parameters().extent(0)));
}

template <class T>
std::vector<std::int64_t> Pipeline<T>::gather_boundary_bytes() const {
  std::vector<std::int64_t> out(static_cast<size_t>(shape_.cells));
  MPI_Allgather(&last_boundary_bytes_, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, grid_.pipeline());
  return out;
}

template <class T>
std::uint64_t Pipeline<T>::checksum() const {
  // FNV-1a over the bytes of the parameters and the optimizer state.
  std::uint64_t h = 1469598103934665603ull;
  const ExecSpace space = cell_->execution_space();
  auto add = [&h, &space](const Vector<T>& v) {
    auto m = Kokkos::create_mirror_view(v);
    Kokkos::deep_copy(space, m, v);
    compat::fence(space, "gpipe::Pipeline::checksum");
    const auto* bytes = reinterpret_cast<const unsigned char*>(m.data());
    for (std::size_t i = 0; i < m.span() * sizeof(T); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  };
  add(cell_->parameters());
  for (const auto& [name, values] : optimizer_->state()) add(values);
  return h;
}

template <class T>
bool Pipeline<T>::replicas_identical() const {
  const std::uint64_t mine = checksum();
  std::uint64_t low = mine, high = mine;
  MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_UINT64_T, MPI_MIN, grid_.replica_group());
  MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_UINT64_T, MPI_MAX, grid_.replica_group());
  int same = low == high ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm_.get());
  return all == 1;
}

#define GPIPE_INSTANTIATE(T) template class Pipeline<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

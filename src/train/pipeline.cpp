#include "gpipe/train/pipeline.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpipe/core/error.hpp"
#include "gpipe/model/cost.hpp"

namespace gpipe {

template <class T>
Pipeline<T>::Pipeline(const Deck& deck, MPI_Comm comm) : deck_(deck), comm_(comm) {
  const int K = comm_.size(), M = deck.training.micro_batches;
  const int L = int(deck.model.layers.size());
  const std::int64_t micro = (deck.training.batch_size + M - 1) / M;
  if (deck.pipeline.balance == "explicit") {
    partition_ = explicit_partition(deck.pipeline.counts, L, K);
    costs_ = layer_costs<T>(deck.model, "flops", micro, comm_.get());
  } else {
    if (K > L) balance_min_max(std::vector<double>(size_t(L), 1.0), K);  // throws: K > L
    costs_ = layer_costs<T>(deck.model, deck.pipeline.balance, micro, comm_.get());
    partition_ = balance_min_max(costs_, K);
  }
  CellOptions options;
  options.max_batch = deck.training.batch_size;
  options.micro_batches = M;
  options.remat = deck.pipeline.remat;
  options.seed = deck.seed;
  cell_ = std::make_unique<Cell<T>>(deck.model, partition_, comm_.get(), options);
  optimizer_ = make_optimizer<T>(deck.optimizer, std::int64_t(cell_->parameters().extent(0)));
  MPI_Barrier(comm_.get());
  tracer_ = Tracer(MPI_Wtime());
  cell_->set_tracer(&tracer_);
  if (cell_->is_first()) {
    batch_inputs_ = Matrix<T>("gpipe::Pipeline::batch_inputs", deck.training.batch_size,
                              deck.model.input_features);
    batch_inputs_host_ = Kokkos::create_mirror_view(batch_inputs_);
  }
  if (cell_->is_last()) {
    batch_labels_ = LabelVector("gpipe::Pipeline::batch_labels", deck.training.batch_size);
    batch_labels_host_ = Kokkos::create_mirror_view(batch_labels_);
  }
}

template <class T>
std::int64_t Pipeline<T>::steps_per_epoch(std::int64_t samples) const {
  const auto N = deck_.training.batch_size;
  const auto full = samples / N, rest = samples % N;
  return full + (rest >= deck_.training.micro_batches ? 1 : 0);
}

template <class T>
double Pipeline<T>::next_learning_rate() const {
  if (deck_.optimizer.schedule == "cosine" && total_steps_ <= 0)
    throw InputError(
        "optimizer.schedule: cosine decays over the run's total step count, which is not set: "
        "call set_total_steps (C API: gpipe_set_total_steps) before the first step");
  return learning_rate(deck_.optimizer, steps_done_, total_steps_);
}

template <class T>
double Pipeline<T>::from_last(double value) const {
  MPI_Bcast(&value, 1, MPI_DOUBLE, comm_.size() - 1, comm_.get());
  return value;
}

template <class T>
void Pipeline<T>::stage_batch(const float* inputs, std::int64_t features, const std::int32_t* labels,
                              const std::int64_t* order, std::int64_t n) {
  require(n >= 1 && n <= deck_.training.batch_size,
          fmt::format("a batch of {} samples: expected 1 to training.batch_size = {}", n,
                      deck_.training.batch_size));
  if (cell_->is_first()) {
    const auto f = features;
    require(f == deck_.model.input_features,
            fmt::format("samples have {} features but model.input is {}", f, deck_.model.input_features));
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = inputs + (order ? order[i] : i) * f;
      for (std::int64_t j = 0; j < f; ++j) batch_inputs_host_(i, j) = T(row[j]);
    }
    Kokkos::deep_copy(batch_inputs_, batch_inputs_host_);
  }
  if (cell_->is_last() && labels) {
    for (std::int64_t i = 0; i < n; ++i) batch_labels_host_(i) = labels[order ? order[i] : i];
    Kokkos::deep_copy(batch_labels_, batch_labels_host_);
  }
}

template <class T>
LossSums Pipeline<T>::step(const Dataset& data, const std::vector<std::int64_t>& order,
                           std::int64_t begin, std::int64_t n) {
  stage_batch(data.inputs.data(), data.features, data.labels.data(), order.data() + begin, n);
  return step_staged(n);
}

template <class T>
LossSums Pipeline<T>::step(const float* inputs, const std::int32_t* labels, std::int64_t n) {
  stage_batch(inputs, deck_.model.input_features, labels, nullptr, n);
  return step_staged(n);
}

template <class T>
LossSums Pipeline<T>::step_staged(std::int64_t n) {
  const double lr = next_learning_rate();
  const bool record = !deck_.trace.file.empty() && steps_done_ % deck_.trace.every == 0;
  tracer_.begin_step(steps_done_, record);
  {
    const Tracer::Scope zero(&tracer_, EventKind::Optimizer, -1);
    cell_->zero_gradients();
  }
  const LossSums sums = cell_->train_step(batch_inputs_, batch_labels_, n, std::uint64_t(steps_done_));
  {
    const Tracer::Scope update(&tracer_, EventKind::Optimizer, -1);
    optimizer_->step(cell_->parameters(), cell_->gradients(), lr);
  }
  tracer_.end_step(cell_->activation_bytes());
  ++steps_done_;
  return sums;
}

template <class T>
std::vector<T> Pipeline<T>::predict(const float* inputs, std::int64_t n) {
  stage_batch(inputs, deck_.model.input_features, nullptr, nullptr, n);
  const std::int64_t classes = deck_.model.classes();
  Matrix<T> logits;
  if (cell_->is_last()) logits = Matrix<T>("gpipe::Pipeline::predict", n, classes);
  cell_->predict(batch_inputs_, n, logits);
  std::vector<T> out(static_cast<size_t>(n * classes));
  if (cell_->is_last()) {
    auto h = Kokkos::create_mirror_view(logits);
    Kokkos::deep_copy(h, logits);
    std::copy(h.data(), h.data() + out.size(), out.begin());
  }
  MPI_Bcast(out.data(), int(out.size()), mpi_type<T>(), comm_.size() - 1, comm_.get());
  return out;
}

template <class T>
std::int64_t Pipeline<T>::total_parameters() const {
  std::int64_t total = 0;
  for (const auto& layer : model_shapes(deck_.model)) total += layer.parameter_count();
  return total;
}

template <class T>
Evaluation Pipeline<T>::evaluate(const Dataset& data) {
  const auto N = deck_.training.batch_size;
  std::vector<std::int64_t> order = epoch_order(data.samples, 0, 0, false);
  double sums[2] = {0, 0};
  for (std::int64_t begin = 0; begin < data.samples; begin += N) {
    const auto n = std::min(N, data.samples - begin);
    stage_batch(data.inputs.data(), data.features, data.labels.data(), order.data() + begin, n);
    const LossSums s = cell_->evaluate(batch_inputs_, batch_labels_, n);
    sums[0] += s.loss;
    sums[1] += double(s.correct);
  }
  MPI_Bcast(sums, 2, MPI_DOUBLE, comm_.size() - 1, comm_.get());
  return {sums[0] / double(data.samples), sums[1] / double(data.samples)};
}

template <class T>
void Pipeline<T>::save_checkpoint(const std::string& path) {
  CheckpointShard<T> shard;
  shard.first_layer = cell_->first_layer();
  shard.layer_count = int(cell_->layers().size());
  auto host = [](const Vector<T>& v) {
    auto h = Kokkos::create_mirror_view(v);
    Kokkos::deep_copy(h, v);
    return std::vector<T>(h.data(), h.data() + h.extent(0));
  };
  shard.parameters = host(cell_->parameters());
  for (const auto& [name, values] : optimizer_->state()) shard.optimizer_state.emplace_back(name, host(values));
  CheckpointInfo info;
  info.step = steps_done_;
  info.epoch = steps_per_epoch_ > 0 ? steps_done_ / steps_per_epoch_ : 0;
  info.seed = deck_.seed;
  info.precision = sizeof(T) == 4 ? "float" : "double";
  info.optimizer = deck_.optimizer.type;
  info.optimizer_steps = optimizer_->steps();
  info.deck = deck_.text;
  write_checkpoint(path, deck_.model, info, shard, comm_.get());
}

template <class T>
CheckpointInfo Pipeline<T>::load_checkpoint(const std::string& path) {
  CheckpointShard<T> shard;
  shard.first_layer = cell_->first_layer();
  shard.layer_count = int(cell_->layers().size());
  const auto state = optimizer_->state();
  for (const auto& [name, values] : state) shard.optimizer_state.emplace_back(name, std::vector<T>());
  const CheckpointInfo info = read_checkpoint(path, deck_.model, deck_.optimizer.type, shard, comm_.get());
  auto device = [](const std::vector<T>& from, const Vector<T>& to) {
    auto h = Kokkos::create_mirror_view(to);
    std::copy(from.begin(), from.end(), h.data());
    Kokkos::deep_copy(to, h);
  };
  device(shard.parameters, cell_->parameters());
  for (size_t i = 0; i < state.size(); ++i) device(shard.optimizer_state[i].second, state[i].second);
  optimizer_->set_steps(info.optimizer_steps);
  steps_done_ = info.step;
  if (info.seed != deck_.seed && comm_.rank() == 0)
    spdlog::warn("{}: written with seed {}, the deck has seed {}: the data order and Dropout masks "
                 "differ from an uninterrupted run",
                 path, info.seed, deck_.seed);
  return info;
}

template <class T>
std::vector<T> Pipeline<T>::gather_parameters() const {
  const int K = comm_.size();
  auto host = Kokkos::create_mirror_view(cell_->parameters());
  Kokkos::deep_copy(host, cell_->parameters());
  int local = int(host.extent(0));
  std::vector<int> counts(static_cast<size_t>(K)), displs(static_cast<size_t>(K), 0);
  MPI_Gather(&local, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_.get());
  std::vector<T> all;
  if (comm_.rank() == 0) {
    for (int k = 1; k < K; ++k) displs[size_t(k)] = displs[size_t(k) - 1] + counts[size_t(k) - 1];
    all.resize(size_t(displs.back() + counts.back()));
  }
  MPI_Gatherv(host.data(), local, mpi_type<T>(), all.data(), counts.data(), displs.data(),
              mpi_type<T>(), 0, comm_.get());
  return all;
}

template <class T>
std::vector<std::int64_t> Pipeline<T>::gather_activation_bytes() const {
  std::vector<std::int64_t> out(static_cast<size_t>(comm_.size()));
  const std::int64_t mine = cell_->activation_bytes();
  MPI_Allgather(&mine, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, comm_.get());
  return out;
}

template class Pipeline<float>;
template class Pipeline<double>;

}  // namespace gpipe

#include "gpipe/train/trainer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int comm_rank(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
int comm_size(MPI_Comm comm) {
  int s = 1;
  MPI_Comm_size(comm, &s);
  return s;
}

// Seconds of forward + backward of one layer on a (batch, in) micro-batch.
template <class T>
double time_layer(const ModelSpec& model, std::int64_t index, std::int64_t batch) {
  auto layer = make_layer<T>(model, index);
  Vector<T> p("gpipe::profile::parameters", layer->parameter_count());
  Vector<T> g("gpipe::profile::gradients", layer->parameter_count());
  layer->bind(p.data(), g.data());
  layer->initialize(0);
  Matrix<T> x("gpipe::profile::x", batch, layer->in_features());
  Matrix<T> y("gpipe::profile::y", batch, layer->out_features());
  // The model's first layer never computes an input gradient (see Cell::backward).
  Matrix<T> dx("gpipe::profile::dx", index == 0 ? 0 : batch, layer->in_features());
  Kokkos::deep_copy(x, T(0.5));
  Kokkos::deep_copy(y, T(0.25));
  const PassContext ctx{};
  layer->forward(ctx, x, y);  // warm-up
  layer->backward(ctx, x, y, dx);
  compat::fence("gpipe::profile");
  const int reps = 3;
  const double start = now();
  for (int r = 0; r < reps; ++r) {
    layer->forward(ctx, x, y);
    layer->backward(ctx, x, y, dx);
  }
  compat::fence("gpipe::profile");
  return (now() - start) / reps;
}
}  // namespace

template <class T>
std::vector<double> layer_costs(const ModelSpec& model, const std::string& mode,
                                std::int64_t micro_batch, MPI_Comm comm) {
  const auto L = std::int64_t(model.layers.size());
  std::vector<double> costs(size_t(L), 0.0);
  if (mode == "time") {
    if (comm_rank(comm) == 0)
      for (std::int64_t l = 0; l < L; ++l) costs[size_t(l)] = time_layer<T>(model, l, micro_batch);
    MPI_Bcast(costs.data(), int(L), MPI_DOUBLE, 0, comm);
    return costs;
  }
  for (std::int64_t l = 0; l < L; ++l) {
    const auto layer = make_layer<T>(model, l);
    costs[size_t(l)] = mode == "params" ? double(layer->parameter_count()) : layer->flops(micro_batch, l > 0);
  }
  return costs;
}

template <class T>
Trainer<T>::Trainer(const Deck& deck, MPI_Comm comm) : deck_(deck), comm_(comm) {
  const int K = comm_size(comm), M = deck.training.micro_batches;
  const int L = int(deck.model.layers.size());
  const std::int64_t micro = (deck.training.batch_size + M - 1) / M;
  if (deck.pipeline.balance == "explicit") {
    partition_ = explicit_partition(deck.pipeline.counts, L, K);
    costs_ = layer_costs<T>(deck.model, "flops", micro, comm);
  } else {
    if (K > L) balance_min_max(std::vector<double>(size_t(L), 1.0), K);  // throws: K > L
    costs_ = layer_costs<T>(deck.model, deck.pipeline.balance, micro, comm);
    partition_ = balance_min_max(costs_, K);
  }
  CellOptions options;
  options.max_batch = deck.training.batch_size;
  options.micro_batches = M;
  options.remat = deck.pipeline.remat;
  options.seed = deck.seed;
  cell_ = std::make_unique<Cell<T>>(deck.model, partition_, comm, options);
  optimizer_ = make_optimizer<T>(deck.optimizer, std::int64_t(cell_->parameters().extent(0)));
  MPI_Barrier(comm);
  tracer_ = Tracer(MPI_Wtime());
  cell_->set_tracer(&tracer_);
  if (cell_->is_first()) {
    batch_inputs_ = Matrix<T>("gpipe::Trainer::batch_inputs", deck.training.batch_size,
                              deck.model.input_features);
    batch_inputs_host_ = Kokkos::create_mirror_view(batch_inputs_);
  }
  if (cell_->is_last()) {
    batch_labels_ = LabelVector("gpipe::Trainer::batch_labels", deck.training.batch_size);
    batch_labels_host_ = Kokkos::create_mirror_view(batch_labels_);
  }
}

template <class T>
std::int64_t Trainer<T>::steps_per_epoch(std::int64_t samples) const {
  const auto N = deck_.training.batch_size;
  const auto full = samples / N, rest = samples % N;
  return full + (rest >= deck_.training.micro_batches ? 1 : 0);
}

template <class T>
void Trainer<T>::stage_batch(const float* inputs, std::int64_t features, const std::int32_t* labels,
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
LossSums Trainer<T>::step(const Dataset& data, const std::vector<std::int64_t>& order,
                          std::int64_t begin, std::int64_t n) {
  stage_batch(data.inputs.data(), data.features, data.labels.data(), order.data() + begin, n);
  return step_staged(n);
}

template <class T>
LossSums Trainer<T>::step(const float* inputs, const std::int32_t* labels, std::int64_t n) {
  stage_batch(inputs, deck_.model.input_features, labels, nullptr, n);
  return step_staged(n);
}

template <class T>
LossSums Trainer<T>::step_staged(std::int64_t n) {
  const bool record = !deck_.trace.file.empty() && steps_done_ % deck_.trace.every == 0;
  tracer_.begin_step(steps_done_, record);
  {
    const Tracer::Scope zero(&tracer_, EventKind::Optimizer, -1);
    cell_->zero_gradients();
  }
  const LossSums sums = cell_->train_step(batch_inputs_, batch_labels_, n, std::uint64_t(steps_done_));
  {
    const Tracer::Scope update(&tracer_, EventKind::Optimizer, -1);
    optimizer_->step(cell_->parameters(), cell_->gradients(),
                     learning_rate(deck_.optimizer, steps_done_, total_steps_));
  }
  tracer_.end_step(cell_->activation_bytes());
  ++steps_done_;
  return sums;
}

template <class T>
std::vector<T> Trainer<T>::predict(const float* inputs, std::int64_t n) {
  stage_batch(inputs, deck_.model.input_features, nullptr, nullptr, n);
  const std::int64_t classes = deck_.model.classes();
  Matrix<T> logits;
  if (cell_->is_last()) logits = Matrix<T>("gpipe::Trainer::predict", n, classes);
  cell_->predict(batch_inputs_, n, logits);
  std::vector<T> out(static_cast<size_t>(n * classes));
  if (cell_->is_last()) {
    auto h = Kokkos::create_mirror_view(logits);
    Kokkos::deep_copy(h, logits);
    std::copy(h.data(), h.data() + out.size(), out.begin());
  }
  MPI_Bcast(out.data(), int(out.size()), mpi_type<T>(), comm_size(comm_) - 1, comm_);
  return out;
}

template <class T>
std::int64_t Trainer<T>::total_parameters() const {
  std::int64_t total = 0;
  for (std::int64_t l = 0; l < std::int64_t(deck_.model.layers.size()); ++l)
    total += make_layer<T>(deck_.model, l)->parameter_count();
  return total;
}

template <class T>
Evaluation Trainer<T>::evaluate(const Dataset& data) {
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
  MPI_Bcast(sums, 2, MPI_DOUBLE, comm_size(comm_) - 1, comm_);
  return {sums[0] / double(data.samples), sums[1] / double(data.samples)};
}

template <class T>
std::vector<EpochReport> Trainer<T>::fit(const Dataset& train, const Dataset& test,
                                         std::ostream* log) {
  const auto& t = deck_.training;
  const auto& c = deck_.checkpoint;
  const bool root = comm_rank(comm_) == 0;
  const int last = comm_size(comm_) - 1;
  const auto per_epoch = steps_per_epoch(train.samples);
  steps_per_epoch_ = per_epoch;
  total_steps_ = per_epoch * t.epochs;
  std::int64_t saved_at = -1;
  auto checkpoint = [&] {
    if (c.directory.empty() || saved_at == steps_done_) return;
    save_checkpoint(checkpoint_path(c.directory, steps_done_));
    if (root) prune_checkpoints(c.directory, c.keep);
    saved_at = steps_done_;
    if (root && log) *log << fmt::format("  checkpoint {}\n", checkpoint_path(c.directory, steps_done_));
  };
  std::vector<EpochReport> reports;
  for (std::int64_t epoch = steps_done_ / per_epoch; epoch < t.epochs; ++epoch) {
    const auto order = epoch_order(train.samples, deck_.seed, epoch, t.shuffle);
    double loss_sum = 0;
    std::int64_t seen = 0;
    const double start = now();
    for (std::int64_t s = steps_done_ - epoch * per_epoch; s < per_epoch; ++s) {
      const auto begin = s * t.batch_size;
      const auto n = std::min(t.batch_size, train.samples - begin);
      loss_sum += step(train, order, begin, n).loss;
      seen += n;
      if (c.every_steps > 0 && steps_done_ % c.every_steps == 0) checkpoint();
      if (t.progress_every > 0 && (s + 1) % t.progress_every == 0 && s + 1 < per_epoch) {
        double running = loss_sum;
        MPI_Bcast(&running, 1, MPI_DOUBLE, last, comm_);
        if (root && log)
          *log << fmt::format("  epoch {}/{}  step {:>5}/{}  loss {:.4f}  {:.0f} samples/s\n",
                              epoch + 1, t.epochs, s + 1, per_epoch, running / double(seen),
                              double(seen) / (now() - start))
               << std::flush;
      }
    }
    compat::fence("gpipe::Trainer::epoch");
    MPI_Barrier(comm_);
    EpochReport r;
    r.epoch = epoch + 1;
    r.seconds = now() - start;
    r.samples_per_second = double(seen) / r.seconds;
    MPI_Bcast(&loss_sum, 1, MPI_DOUBLE, last, comm_);
    r.train_loss = seen > 0 ? loss_sum / double(seen) : 0.0;
    r.test = evaluate(test);
    if (root && log)
      *log << fmt::format("epoch {}/{}: train loss {:.4f}, test loss {:.4f}, test accuracy "
                          "{:.4f}, {:.0f} samples/s, {:.1f} s\n",
                          r.epoch, t.epochs, r.train_loss, r.test.loss, r.test.accuracy,
                          r.samples_per_second, r.seconds)
           << std::flush;
    reports.push_back(r);
    if (c.every_epochs > 0 && (epoch + 1) % c.every_epochs == 0) checkpoint();
  }
  return reports;
}

template <class T>
void Trainer<T>::save_checkpoint(const std::string& path) {
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
  write_checkpoint(path, deck_.model, info, shard, comm_);
}

template <class T>
CheckpointInfo Trainer<T>::load_checkpoint(const std::string& path) {
  CheckpointShard<T> shard;
  shard.first_layer = cell_->first_layer();
  shard.layer_count = int(cell_->layers().size());
  const auto state = optimizer_->state();
  for (const auto& [name, values] : state) shard.optimizer_state.emplace_back(name, std::vector<T>());
  const CheckpointInfo info = read_checkpoint(path, deck_.model, deck_.optimizer.type, shard, comm_);
  auto device = [](const std::vector<T>& from, const Vector<T>& to) {
    auto h = Kokkos::create_mirror_view(to);
    std::copy(from.begin(), from.end(), h.data());
    Kokkos::deep_copy(to, h);
  };
  device(shard.parameters, cell_->parameters());
  for (size_t i = 0; i < state.size(); ++i) device(shard.optimizer_state[i].second, state[i].second);
  optimizer_->set_steps(info.optimizer_steps);
  steps_done_ = info.step;
  if (info.seed != deck_.seed && comm_rank(comm_) == 0)
    spdlog::warn("{}: written with seed {}, the deck has seed {}: the data order and Dropout masks "
                 "differ from an uninterrupted run",
                 path, info.seed, deck_.seed);
  return info;
}

template <class T>
std::vector<T> Trainer<T>::gather_parameters() const {
  const int K = comm_size(comm_);
  auto host = Kokkos::create_mirror_view(cell_->parameters());
  Kokkos::deep_copy(host, cell_->parameters());
  int local = int(host.extent(0));
  std::vector<int> counts(static_cast<size_t>(K)), displs(static_cast<size_t>(K), 0);
  MPI_Gather(&local, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_);
  std::vector<T> all;
  if (comm_rank(comm_) == 0) {
    for (int k = 1; k < K; ++k) displs[size_t(k)] = displs[size_t(k) - 1] + counts[size_t(k) - 1];
    all.resize(size_t(displs.back() + counts.back()));
  }
  MPI_Gatherv(host.data(), local, mpi_type<T>(), all.data(), counts.data(), displs.data(),
              mpi_type<T>(), 0, comm_);
  return all;
}

template <class T>
std::vector<std::int64_t> Trainer<T>::gather_activation_bytes() const {
  std::vector<std::int64_t> out(static_cast<size_t>(comm_size(comm_)));
  const std::int64_t mine = cell_->activation_bytes();
  MPI_Allgather(&mine, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, comm_);
  return out;
}

template class Trainer<float>;
template class Trainer<double>;
template std::vector<double> layer_costs<float>(const ModelSpec&, const std::string&, std::int64_t,
                                                MPI_Comm);
template std::vector<double> layer_costs<double>(const ModelSpec&, const std::string&,
                                                 std::int64_t, MPI_Comm);

}  // namespace gpipe

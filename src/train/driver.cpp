#include "gpipe/train/driver.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <ctime>

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

template <class T>
Driver<T>::Driver(Pipeline<T>& pipeline, std::ostream* log)
    : pipeline_(pipeline), log_(pipeline.rank() == 0 ? log : nullptr) {}

template <class T>
std::string Driver<T>::checkpoint_directory() const {
  const auto& c = pipeline_.deck().checkpoint;
  return c.directory.empty() ? std::string(".") : c.directory;
}

template <class T>
void Driver<T>::checkpoint(bool always) {
  const auto& c = pipeline_.deck().checkpoint;
  const std::int64_t step = pipeline_.steps_done();
  if ((c.directory.empty() && !always) || saved_at_ == step) return;
  const std::string directory = checkpoint_directory();
  pipeline_.save_checkpoint(checkpoint_path(directory, step));
  if (pipeline_.rank() == 0) prune_checkpoints(directory, c.keep);
  saved_at_ = step;
  if (log_) *log_ << fmt::format("  checkpoint {}\n", checkpoint_path(directory, step));
}

template <class T>
void Driver<T>::log_progress(std::int64_t epoch, std::int64_t step, const LossSums& sums,
                             std::int64_t seen, double start) {
  const auto& t = pipeline_.deck().training;
  const double running = pipeline_.from_last(sums.loss);
  std::string metric;
  if (pipeline_.deck().model.loss.regression()) {  // collective: before the rank-0 return
    const auto m = regression_metrics(pipeline_.from_last(sums.moments), seen,
                                      pipeline_.normalization().target_std);
    metric = fmt::format("  rmse {:.4g}", m.rmse_all);
  }
  if (!log_) return;
  const std::int64_t done = pipeline_.steps_done();
  const double per_step = (MPI_Wtime() - fit_start_) / double(std::max<std::int64_t>(done - first_step_, 1));
  const auto eta = std::int64_t(per_step * double(pipeline_.total_steps() - done) + 0.5);
  const std::time_t wall = std::time(nullptr);
  std::tm tm{};
  localtime_r(&wall, &tm);
  // The rate of the step just taken (next_learning_rate() is that of step `done`).
  const double lr = learning_rate(pipeline_.deck().optimizer, done - 1, pipeline_.total_steps());
  *log_ << fmt::format("  {:02d}:{:02d}:{:02d}  epoch {}/{}  step {:>5}/{}  loss {:.4f}{}  lr {:.3g}  "
                       "{:.0f} samples/s  ETA {}:{:02d}:{:02d}\n",
                       tm.tm_hour, tm.tm_min, tm.tm_sec, epoch + 1, t.epochs, step + 1, per_epoch_,
                       running / double(seen), metric, lr, double(seen) / (MPI_Wtime() - start),
                       eta / 3600, eta / 60 % 60, eta % 60)
        << std::flush;
}

template <class T>
std::pair<LossSums, std::int64_t> Driver<T>::train_epoch(const Dataset& train, std::int64_t epoch,
                                                         double start) {
  const auto& deck = pipeline_.deck();
  const auto& t = deck.training;
  const auto& c = deck.checkpoint;
  const auto order = epoch_order(train.samples, deck.seed, epoch, t.shuffle);
  LossSums sums;
  std::int64_t seen = 0;
  for (std::int64_t s = pipeline_.steps_done() - epoch * per_epoch_; s < per_epoch_; ++s) {
    const auto begin = s * t.batch_size;
    const auto n = std::min(t.batch_size, train.samples - begin);
    sums += pipeline_.step(train, order, begin, n);
    seen += n;
    if (c.every_steps > 0 && pipeline_.steps_done() % c.every_steps == 0) checkpoint();
    if (stop_ && stop_()) {
      stopped_ = true;
      checkpoint(true);
      break;
    }
    if (t.progress_every > 0 && (s + 1) % t.progress_every == 0 && s + 1 < per_epoch_)
      log_progress(epoch, s, sums, seen, start);
  }
  return {sums, seen};
}

namespace {
// The test metrics of an epoch line: accuracy, or RMSE, MAE and R^2.
std::string test_metrics(const Evaluation& e, bool regression) {
  if (!regression) return fmt::format("test accuracy {:.4f}", e.accuracy);
  const auto& m = e.regression;
  return fmt::format("test rmse {:.4g}, mae {:.4g}, r2 {:.4f}", m.rmse_all, m.mae_all, m.r2_all);
}
}  // namespace

template <class T>
std::vector<EpochReport> Driver<T>::fit(const Dataset& train, const Dataset& test) {
  const auto& t = pipeline_.deck().training;
  const auto& c = pipeline_.deck().checkpoint;
  per_epoch_ = pipeline_.steps_per_epoch(train.samples);
  require(per_epoch_ > 0, fmt::format("{}: {} training samples, fewer than one step needs "
                                      "(training.micro_batches = {})",
                                      train.labels_name, train.samples, t.micro_batches));
  pipeline_.set_steps_per_epoch(per_epoch_);
  pipeline_.set_total_steps(per_epoch_ * t.epochs);
  std::vector<EpochReport> reports;
  stopped_ = false;
  first_step_ = pipeline_.steps_done();
  fit_start_ = MPI_Wtime();
  for (std::int64_t epoch = pipeline_.steps_done() / per_epoch_; epoch < t.epochs; ++epoch) {
    const double start = MPI_Wtime();
    auto [sums, seen] = train_epoch(train, epoch, start);
    if (stopped_) break;  // the same decision on every rank: no report of a partial epoch
    compat::fence("gpipe::Driver::epoch");
    MPI_Barrier(pipeline_.comm());
    EpochReport r;
    r.epoch = epoch + 1;
    r.seconds = MPI_Wtime() - start;
    r.samples_per_second = double(seen) / r.seconds;
    const double loss_sum = pipeline_.from_last(sums.loss);
    r.train_loss = seen > 0 ? loss_sum / double(seen) : 0.0;
    const bool regression = pipeline_.deck().model.loss.regression();
    if (regression)
      r.train_metrics = regression_metrics(pipeline_.from_last(sums.moments), seen,
                                           pipeline_.normalization().target_std);
    r.test = pipeline_.evaluate(test);
    if (log_)
      *log_ << fmt::format("epoch {}/{}: train loss {:.4f}, test loss {:.4f}, {}, {:.0f} "
                           "samples/s, {:.1f} s\n",
                           r.epoch, t.epochs, r.train_loss, r.test.loss,
                           test_metrics(r.test, regression), r.samples_per_second, r.seconds)
            << std::flush;
    reports.push_back(r);
    if (c.every_epochs > 0 && (epoch + 1) % c.every_epochs == 0) checkpoint();
  }
  return reports;
}

template <class T>
std::vector<EpochReport> fit(Pipeline<T>& pipeline, const Dataset& train, const Dataset& test,
                             std::ostream* log) {
  return Driver<T>(pipeline, log).fit(train, test);
}

template class Driver<float>;
template class Driver<double>;
template std::vector<EpochReport> fit<float>(Pipeline<float>&, const Dataset&, const Dataset&,
                                             std::ostream*);
template std::vector<EpochReport> fit<double>(Pipeline<double>&, const Dataset&, const Dataset&,
                                              std::ostream*);

}  // namespace gpipe

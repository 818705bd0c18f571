#include "gpipe/train/driver.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/loss/token_cross_entropy.hpp"
#include "gpipe/train/restart.hpp"

namespace gpipe {

namespace {
// A figure, or "not finite" (never a number computed from NaN or infinity).
std::string figure(double value, bool valid = true) {
  return valid && std::isfinite(value) ? fmt::format("{:.4f}", value) : std::string("not finite");
}

// The test metrics of an epoch line: accuracy, or RMSE, MAE and R^2; for a
// language model perplexity, bits per token (character) and token accuracy.
std::string test_metrics(const Evaluation& e, const LossSpec& loss) {
  const bool regression = loss.regression();
  if (loss.tokens()) {
    const auto m = token_metrics(e.loss);
    return fmt::format("test perplexity {}, bits per token {}, token accuracy {}",
                       figure(m.perplexity, e.finite()), figure(m.bits, e.finite()),
                       figure(e.accuracy, e.finite()));
  }
  if (!regression) return "test accuracy " + figure(e.accuracy, e.finite());
  const auto& m = e.regression;
  return fmt::format("test rmse {}, mae {}, r2 {}", figure(m.rmse_all, e.finite()),
                     figure(m.mae_all, e.finite()), figure(m.r2_all, e.finite()));
}
}  // namespace

template <class T>
Driver<T>::Driver(Pipeline<T>& pipeline, std::ostream* log)
    : pipeline_(pipeline), log_(pipeline.rank() == 0 ? log : nullptr) {}

template <class T>
std::string Driver<T>::checkpoint_directory() const {
  const auto& c = pipeline_.deck().checkpoint;
  return c.directory.empty() ? std::string(".") : c.directory;
}

template <class T>
void Driver<T>::share_loss() {
  DataPosition p = pipeline_.position();
  p.epoch_loss_sum = pipeline_.from_last(p.epoch_loss_sum);
  p.loss_samples = std::int64_t(pipeline_.from_last(double(p.loss_samples)));
  p.metric_moments = pipeline_.from_last(p.metric_moments);
  p.metric_samples = std::int64_t(pipeline_.from_last(double(p.metric_samples)));
  pipeline_.set_position(p);
}

template <class T>
void Driver<T>::checkpoint(bool always) {
  const auto& c = pipeline_.deck().checkpoint;
  const std::int64_t step = pipeline_.steps_done();
  if ((c.directory.empty() && !always) || saved_at_ == step) return;
  share_loss();
  const std::string directory = checkpoint_directory();
  const std::string path = checkpoint_path(directory, step, pipeline_.run_id());
  pipeline_.save_checkpoint(path);
  if (pipeline_.rank() == 0) prune_checkpoints(directory, pipeline_.run_id(), c.keep);
  saved_at_ = step;
  if (log_) *log_ << fmt::format("  checkpoint {}\n", path);
}

template <class T>
void Driver<T>::log_progress(std::int64_t step, std::int64_t seen, double start) {
  const auto& t = pipeline_.deck().training;
  const DataPosition& p = pipeline_.position();
  const double sum = pipeline_.from_last(p.epoch_loss_sum);
  const double count = pipeline_.from_last(double(p.loss_samples));
  std::string metric;
  double rmse = 0;
  if (pipeline_.deck().model.loss.regression()) {  // collective: before the rank-0 return
    const auto m = regression_metrics(pipeline_.from_last(p.metric_moments),
                                      std::int64_t(pipeline_.from_last(double(p.metric_samples))),
                                      pipeline_.normalization().target_std);
    rmse = m.rmse_all;
    metric = "  rmse " + figure(m.rmse_all);
  }
  const bool root = pipeline_.rank() == 0;
  if (!log_ && !(root && progress_)) return;
  const std::int64_t done = pipeline_.steps_done();
  const double lr = pipeline_.last_learning_rate();  // that of the step just taken
  // No applied step yet (every one skipped): no loss, not 0 (docs/file-formats.md: null).
  const double loss = count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN();
  const double rate = double(seen) / (MPI_Wtime() - start);
  if (root && progress_) {
    ProgressRecord r;
    r.step = done;
    r.epoch = p.epoch + 1;
    r.epoch_step = step;
    r.epoch_steps = per_epoch_;
    r.loss = loss;
    r.loss_finite = std::isfinite(loss);
    r.regression = !metric.empty();
    r.train_rmse = rmse;
    r.learning_rate = lr;
    r.samples_per_second = rate;
    progress_(r);
  }
  if (!log_) return;
  const double per_step = (MPI_Wtime() - fit_start_) / double(std::max<std::int64_t>(done - first_step_, 1));
  const auto eta = std::int64_t(per_step * double(pipeline_.total_steps() - done) + 0.5);
  const std::time_t wall = std::time(nullptr);
  std::tm tm{};
  localtime_r(&wall, &tm);
  *log_ << fmt::format("  {:02d}:{:02d}:{:02d}  epoch {}/{}  step {:>5}/{}  loss {}{}  lr {:.3g}  "
                       "{:.0f} samples/s  ETA {}:{:02d}:{:02d}\n",
                       tm.tm_hour, tm.tm_min, tm.tm_sec, p.epoch + 1, t.epochs, step, per_epoch_,
                       count > 0 ? figure(loss) : std::string("none (every step skipped)"), metric, lr, rate,
                       eta / 3600, eta / 60 % 60, eta % 60)
        << std::flush;
}

template <class T>
std::int64_t Driver<T>::train_epoch(const Dataset& train, double start) {
  const auto& deck = pipeline_.deck();
  const auto& t = deck.training;
  const auto& c = deck.checkpoint;
  const auto order = epoch_order(train.samples, deck.seed, pipeline_.position().epoch, t.shuffle);
  std::int64_t seen = 0;
  for (;;) {
    DataPosition p = pipeline_.position();
    const auto begin = p.epoch_samples;
    const auto n = std::min(t.batch_size, train.samples - begin);
    if (n <= 0 || n < pipeline_.min_step_samples()) break;
    const LossSums sums = pipeline_.step(train, order, begin, n);
    p.epoch_samples += n;
    if (!pipeline_.last_step_applied()) ++p.skipped_steps;  // kept in the position: checkpoints carry it
    if (pipeline_.last_step_applied()) {  // a skipped step's loss is not the epoch's
      p.epoch_loss_sum += sums.loss;
      p.loss_samples += n;
      if (deck.model.loss.regression()) {  // kept in the position: checkpoints carry it
        p.metric_moments.resize(sums.moments.size(), 0.0);  // step sums added in step order
        for (size_t k = 0; k < sums.moments.size(); ++k) p.metric_moments[k] += sums.moments[k];
        p.metric_samples += n;
      }
    }
    pipeline_.set_position(p);
    seen += n;
    if (c.every_steps > 0 && pipeline_.steps_done() % c.every_steps == 0) checkpoint();
    if (stop_ && stop_()) {
      stopped_ = true;
      checkpoint(true);
      break;
    }
    const std::int64_t s = (p.epoch_samples + t.batch_size - 1) / t.batch_size;  // steps into the epoch
    if (t.progress_every > 0 && s % t.progress_every == 0 && s < per_epoch_) log_progress(s, seen, start);
  }
  return seen;
}

template <class T>
void Driver<T>::log_epoch(const EpochReport& r, std::int64_t epoch_samples) {
  if (!log_) return;
  std::string notes;
  if (!r.train_loss_whole_epoch && r.train_samples > 0)  // none at all: "none (every step skipped)"
    notes += fmt::format(" (train loss over {} of the epoch's {} samples)", r.train_samples,
                         epoch_samples);
  if (pipeline_.deck().model.loss.regression() && r.train_metric_samples != epoch_samples &&
      r.train_metric_samples != r.train_samples)
    notes += fmt::format(" (train metrics over {} of the epoch's {} samples)", r.train_metric_samples,
                         epoch_samples);
  if (r.skipped_steps > 0)
    notes += fmt::format(" ({} steps skipped: {})", r.skipped_steps,
                         precision_policy(pipeline_.deck().precision).loss_scaling
                             ? "fp16 gradient overflow or non-finite values"
                             : "non-finite values");
  *log_ << fmt::format("epoch {}/{}: train loss {}, test loss {}, {}, {:.0f} "
                       "samples/s, {:.1f} s{}\n",
                       r.epoch, pipeline_.deck().training.epochs,
                       r.train_samples > 0 ? figure(r.train_loss, r.train_loss_finite)
                                           : std::string("none (every step skipped)"),
                       figure(r.test.loss, r.test.finite()),
                       test_metrics(r.test, pipeline_.deck().model.loss),
                       r.samples_per_second, r.seconds, notes)
        << std::flush;
}

template <class T>
std::vector<EpochReport> Driver<T>::fit(const Dataset& train, const Dataset& test) {
  const auto& t = pipeline_.deck().training;
  const auto& c = pipeline_.deck().checkpoint;
  per_epoch_ = pipeline_.steps_per_epoch(train.samples);
  require(per_epoch_ > 0, fmt::format("{}: {} training samples, fewer than one step needs "
                                      "(training.micro_batches = {})",
                                      train.labels_name, train.samples, t.micro_batches));
  pipeline_.set_steps_per_epoch(per_epoch_);
  pipeline_.set_train_samples(train.samples);
  // The learning-rate horizon in samples (a restart with another batch size,
  // layout or rank count continues the same curve), and the steps still to
  // run from the position (for the ETA); both checked for overflow.
  std::int64_t total_samples = 0;
  if (__builtin_mul_overflow(t.epochs, train.samples, &total_samples))
    throw InputError(fmt::format("training.epochs = {}: {} epochs of {} samples is more than 2^63 - 1 "
                                 "samples",
                                 t.epochs, t.epochs, train.samples));
  pipeline_.set_total_samples(total_samples);
  const DataPosition& at = pipeline_.position();
  std::int64_t total = pipeline_.steps_done();
  if (at.epoch < t.epochs)
    total += steps_in_epoch(train.samples, at.epoch_samples, t.batch_size, pipeline_.min_step_samples()) +
             per_epoch_ * (t.epochs - at.epoch - 1);  // <= total_samples: no overflow
  pipeline_.set_total_steps(total);
  const std::int64_t tail = train.samples % t.batch_size;
  if (tail >= pipeline_.min_step_samples())  // a last partial batch is trained: its micro-batches too
    check_micro_batch_statistics(
        pipeline_.deck().model, tail / pipeline_.grid().replicas / t.micro_batches,
        fmt::format("the last batch of every epoch: {} samples ({} % training.batch_size = {}) in "
                    "training.micro_batches = {} per replica on {} replica{}",
                    tail, train.samples, t.batch_size, t.micro_batches, pipeline_.grid().replicas,
                    pipeline_.grid().replicas == 1 ? "" : "s"));
  const std::int64_t untrained = pipeline_.untrained_per_epoch(train.samples);
  if (untrained > 0 && pipeline_.rank() == 0) {
    const std::int64_t D = pipeline_.grid().replicas;
    spdlog::warn(
        "{}: the last {} of every epoch's {} samples (positions {}-{} of the epoch's sample order) "
        "are not trained: a step needs at least D x M = {} samples (D = {} replicas x M = {} "
        "micro-batches) and the last batch has {}; {} samples per epoch are trained",
        train.labels_name, untrained, train.samples, train.samples - untrained, train.samples - 1,
        D * t.micro_batches, D, t.micro_batches, untrained, train.samples - untrained);
  }
  // Before the first step (as gpipe-train and the C API): the directory a
  // checkpoint goes to must be writable on every rank (agreed, the OS's
  // reason in the message), not found at the first save.
  if (!c.directory.empty())
    require_writable_directory("checkpoint.directory", c.directory, pipeline_.comm());
  else if (stop_)
    require_writable_directory("the working directory (where a stop signal's checkpoint goes)", ".",
                               pipeline_.comm());
  std::vector<EpochReport> reports;
  stopped_ = false;
  first_step_ = pipeline_.steps_done();
  fit_start_ = MPI_Wtime();
  while (pipeline_.position().epoch < t.epochs) {
    const std::int64_t epoch = pipeline_.position().epoch;
    const double start = MPI_Wtime();
    const std::int64_t seen = train_epoch(train, start);
    if (stopped_) break;  // the same decision on every rank: no report of a partial epoch
    compat::fence(pipeline_.cell().execution_space(), "gpipe::Driver::epoch");
    MPI_Barrier(pipeline_.comm());
    share_loss();
    const DataPosition& p = pipeline_.position();
    EpochReport r;
    r.epoch = epoch + 1;
    r.seconds = MPI_Wtime() - start;
    r.samples_per_second = r.seconds > 0 ? double(seen) / r.seconds : 0.0;
    r.train_samples = p.loss_samples;
    // Every step skipped (fp16 overflows, skip_step): no train loss (null in the summary), never 0.
    r.train_loss = r.train_samples > 0 ? p.epoch_loss_sum / double(r.train_samples)
                                       : std::numeric_limits<double>::quiet_NaN();
    r.train_loss_finite = std::isfinite(r.train_loss);
    r.train_loss_whole_epoch = r.train_samples == p.epoch_samples;
    r.skipped_steps = p.skipped_steps;  // the whole epoch's, also across a restart
    r.train_metric_samples = p.metric_samples;
    if (pipeline_.deck().model.loss.regression())
      r.train_metrics = regression_metrics(p.metric_moments, p.metric_samples,
                                           pipeline_.normalization().target_std);
    r.test = pipeline_.evaluate(test);
    if (pipeline_.rank() == 0 && epoch_done_) epoch_done_(r);
    log_epoch(r, p.epoch_samples);
    reports.push_back(r);
    pipeline_.set_position(DataPosition{epoch + 1, 0, 0.0, 0, {}, 0});
    if (c.every_epochs > 0 && (epoch + 1) % c.every_epochs == 0) checkpoint();
  }
  return reports;
}

template <class T>
std::vector<EpochReport> fit(Pipeline<T>& pipeline, const Dataset& train, const Dataset& test,
                             std::ostream* log) {
  return Driver<T>(pipeline, log).fit(train, test);
}

#define GPIPE_INSTANTIATE(T) template class Driver<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE
#define GPIPE_INSTANTIATE_FUNCTIONS(T) \
  template std::vector<EpochReport> fit<T>(Pipeline<T>&, const Dataset&, const Dataset&, std::ostream*);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE_FUNCTIONS)
#undef GPIPE_INSTANTIATE_FUNCTIONS

}  // namespace gpipe

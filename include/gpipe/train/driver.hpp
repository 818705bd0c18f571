#pragma once
// The training driver: the epoch loop over a Pipeline, progress and epoch
// logging, and the checkpoint cadence of deck.checkpoint. Used by
// gpipe-train; library users may call Pipeline::step themselves instead.

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gpipe/io/dataset.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe {

struct EpochReport {
  std::int64_t epoch = 0;  ///< 1-based
  double train_loss = 0;   ///< mean over the epoch's trained samples (see train_samples)
  /// Samples train_loss covers: the whole epoch, also after a mid-epoch
  /// restart (checkpoints carry the epoch's loss so far); fewer if steps were
  /// skipped (training.nonfinite: skip_step) or the checkpoint predates that
  /// record; train_loss_whole_epoch says which.
  std::int64_t train_samples = 0;
  bool train_loss_whole_epoch = true;
  /// false if a non-finite loss entered it (nonfinite: ignore), or if no
  /// step of the epoch was applied (train_samples 0: train_loss is NaN, never 0)
  bool train_loss_finite = true;
  /// Steps skipped for non-finite values (or an fp16 overflow) in this epoch:
  /// the whole epoch's, also after a mid-epoch restart (checkpoints carry it).
  std::int64_t skipped_steps = 0;
  /// Regression: training-set metrics over the epoch's steps, as trained
  /// (weights changing during the epoch), in the data's units. Like
  /// train_loss they cover the whole epoch also after a mid-epoch restart
  /// (checkpoints carry the epoch's error moments so far); fewer samples
  /// (train_metric_samples) only after skipped steps or from a checkpoint
  /// written before that record.
  RegressionMetrics train_metrics;
  std::int64_t train_metric_samples = 0;
  Evaluation test;
  double seconds = 0;      ///< training time of the epoch (evaluation excluded)
  double samples_per_second = 0;
};

/// The figures of one progress line (Driver::set_progress), for a metrics
/// stream (gpipe-train --metrics, docs/file-formats.md).
struct ProgressRecord {
  std::int64_t step = 0;         ///< optimizer steps done in the run (earlier jobs of it included)
  std::int64_t epoch = 0;        ///< 1-based
  std::int64_t epoch_step = 0;   ///< steps into the epoch
  std::int64_t epoch_steps = 0;  ///< steps per epoch
  double loss = 0;               ///< running mean training loss of the epoch (standardized targets for regression)
  bool loss_finite = true;
  double train_rmse = 0;         ///< regression: running training RMSE, the data's units
  bool regression = false;
  double learning_rate = 0;      ///< of the step just taken
  double samples_per_second = 0; ///< over the epoch's steps of this fit so far
};

/// Runs deck.training.epochs epochs of a Pipeline.
template <class T>
class Driver {
 public:
  /// `log` (may be null) receives progress lines on rank 0 of the pipeline:
  /// time of day, epoch, step, running loss, learning rate, throughput and the
  /// ETA of the run's remaining steps (at this run's mean step time, evaluation
  /// not included).
  Driver(Pipeline<T>& pipeline, std::ostream* log);

  /// A stop request, asked after every step on every rank; it must give the
  /// same answer on all ranks at the same step (e.g. stop_agreed(comm) != 0,
  /// train/stop_signal.hpp). When it answers true, fit writes a checkpoint of
  /// the current step (to checkpoint.directory, else the working directory;
  /// not again if this step is saved) and returns the reports of the complete
  /// epochs; stopped() is then true. Empty (the default): never stop.
  void set_stop(std::function<bool()> stop) { stop_ = std::move(stop); }
  /// Called on rank 0 of the pipeline at every progress line
  /// (training.progress_every; also when `log` is null) and after every
  /// epoch's report, before the epoch line is printed. Not collective.
  void set_progress(std::function<void(const ProgressRecord&)> progress) {
    progress_ = std::move(progress);
  }
  void set_epoch_done(std::function<void(const EpochReport&)> done) { epoch_done_ = std::move(done); }
  /// Whether the last fit ended on a stop request.
  bool stopped() const { return stopped_; }

  /// Progress lines show the running mean loss (and, for a regression loss,
  /// the running training RMSE in the data's units); epoch lines the test
  /// loss and accuracy (classification) or test RMSE, MAE and R^2 (regression).
  /// Trains until deck.training.epochs epochs are complete, resuming at
  /// pipeline.position() (the epoch and the samples of it already trained,
  /// e.g. from restart_position() after a restart: resumption is by samples
  /// seen, so another batch size continues at the same sample), evaluating
  /// `test` after each epoch and writing checkpoints as deck.checkpoint asks
  /// (named by the pipeline's run identity; pruning removes only this run's
  /// older files). Sets the pipeline's total steps (steps done plus the steps
  /// still to run) for the learning-rate schedule. Figures computed from
  /// non-finite values are printed as "not finite". Collective. Returns one report per epoch trained (empty if
  /// the pipeline is already past the last epoch). Throws InputError if the
  /// training set is smaller than one step (fewer than micro_batches samples),
  /// and, before the first step, AgreedError<InputError> if
  /// deck.checkpoint.directory (or, with a stop request set and no
  /// directory, the working directory) cannot be written on some rank
  /// (require_writable_directory, io/checkpoint.hpp: the OS's reason and the
  /// rank). Every logged figure is formed from exact sums (docs/design.md,
  /// "Metric sums"): the same for every layout (D, K, M) whose per-sample
  /// forward is the same, and reproduced by evaluating the epoch's checkpoint.
  std::vector<EpochReport> fit(const Dataset& train, const Dataset& test);

  /// Writes a checkpoint of the current step into deck.checkpoint.directory
  /// (nothing if no directory is set, unless `always`: then into the working
  /// directory; nothing if this step is already saved), named by the
  /// pipeline's run identity, and prunes this run's older ones to
  /// deck.checkpoint.keep (other runs' files never). Collective.
  void checkpoint(bool always = false);

  /// The directory checkpoint(true) writes to: checkpoint.directory, else ".".
  std::string checkpoint_directory() const;

 private:
  // One epoch's training steps from the pipeline's position; returns the
  // samples trained in this call.
  std::int64_t train_epoch(const Dataset& train, double start);
  void log_progress(std::int64_t step, std::int64_t seen, double start);
  // The epoch's loss so far (on the last cell) onto every rank's position.
  void share_loss();
  void log_epoch(const EpochReport& r, std::int64_t epoch_samples);

  Pipeline<T>& pipeline_;
  std::ostream* log_;
  std::int64_t per_epoch_ = 0;
  std::int64_t saved_at_ = -1;
  std::function<bool()> stop_;
  std::function<void(const ProgressRecord&)> progress_;
  std::function<void(const EpochReport&)> epoch_done_;
  bool stopped_ = false;
  std::int64_t first_step_ = 0;  // the step this fit started from, and its time (for the ETA)
  double fit_start_ = 0;
  // Regression: the loss sums (moments) of the applied steps of this epoch
  // since this fit started (valid on the last cell), and their samples.
};

/// Driver<T>(pipeline, log).fit(train, test).
template <class T>
std::vector<EpochReport> fit(Pipeline<T>& pipeline, const Dataset& train, const Dataset& test,
                             std::ostream* log);

}  // namespace gpipe

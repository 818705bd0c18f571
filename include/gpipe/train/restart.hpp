#pragma once
// Where a restarted run resumes in its training data.

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/deck.hpp"

namespace gpipe {

/// A run's place in its data: the epoch (0-based) of the next step, the
/// samples of that epoch already trained on (in the epoch's order, see
/// epoch_order), and the sum of their training losses (on the last rank
/// while training; on every rank in checkpoints and reports).
struct DataPosition {
  std::int64_t epoch = 0;
  std::int64_t epoch_samples = 0;
  double epoch_loss_sum = 0;
  /// Samples epoch_loss_sum covers: epoch_samples unless steps were skipped
  /// (training.nonfinite: skip_step) or the checkpoint predates this record.
  std::int64_t loss_samples = 0;
  /// Regression: the epoch's error moments so far (LossSums::moments, 4 per
  /// output) over metric_samples samples, so the epoch's train metrics
  /// cover the whole epoch across a restart. Empty for classification.
  std::vector<double> metric_moments;
  std::int64_t metric_samples = 0;
  /// Steps of this epoch so far whose update was skipped (non-finite values
  /// or an fp16 overflow), so the epoch's report counts them all across a
  /// restart (EpochReport::skipped_steps).
  std::int64_t skipped_steps = 0;
};

/// The position a restart from checkpoint `path` (header `info`) resumes at
/// under `deck`, whose training set has `train_samples` samples. Resumes by
/// samples seen: a different training.batch_size, training.micro_batches or
/// number of ranks continues at the same sample of the same epoch. Throws
/// InputError naming the changed keys when they make a mid-epoch position
/// meaningless: the training set (data.format, data.train_images,
/// data.train_labels, data.train_file, data.inputs_dataset, data.labels_dataset,
/// data.train_limit, or its sample count) or its order (seed,
/// training.shuffle). At an epoch boundary such changes are allowed and
/// returned in `changed` (for a warning). Checkpoints older than these
/// records resume by step with the batch size of their own deck.
///
/// The checkpoint's deck is read with parse_stored_deck (io/deck.hpp). When
/// it still does not parse, or has no data section (a C API run's), the keys
/// above cannot be compared: mid-epoch (the position depends on them) this
/// throws InputError naming `path` and the reason; at an epoch boundary (the
/// position does not) it resumes and sets `skipped_check` (if not null; ""
/// otherwise) to a warning naming `path`, the reason and that the check was
/// skipped, which the caller prints once (gpipe-train: rank 0). Not collective.
DataPosition restart_position(const CheckpointInfo& info, const std::string& path, const Deck& deck,
                              std::int64_t train_samples, std::vector<std::string>* changed = nullptr,
                              std::string* skipped_check = nullptr);

/// Optimizer steps of one epoch of `samples` samples from sample `offset` on:
/// full batches of `batch_size`, plus a last partial batch if it holds at
/// least `min_samples` samples (D x M: a sample per micro-batch per replica).
std::int64_t steps_in_epoch(std::int64_t samples, std::int64_t offset, std::int64_t batch_size,
                            std::int64_t min_samples);

}  // namespace gpipe

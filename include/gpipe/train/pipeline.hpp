#pragma once
// The library-level pipeline: a model described by a Deck, partitioned over
// the ranks of a private duplicate of the caller's communicator (one cell per
// rank), with its optimizer and batch staging. It runs one step, prediction
// or evaluation per call; the epoch loop lives in train/driver.hpp.

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/optim/optimizer.hpp"
#include "gpipe/pipeline/cell.hpp"
#include "gpipe/pipeline/trace.hpp"
#include "gpipe/pipeline/transport.hpp"

namespace gpipe {

struct Evaluation {
  double loss = 0;      ///< mean loss per sample
  double accuracy = 0;  ///< fraction of correct predictions
};

/// GPipe training of deck.model on the ranks of `comm`.
///
/// Communicators: the constructor duplicates `comm` once (MPI_Comm_dup, freed
/// by the destructor); every collective and point-to-point call of the
/// pipeline runs on that duplicate (or communicators derived from it), never
/// on `comm` itself, so the caller's own messages cannot collide with gpipe's.
///
/// Learning rate: the rate of step s is learning_rate(deck.optimizer, s,
/// total_steps()), a function of the step and of a total step count the user
/// sets with set_total_steps() (the driver sets it to epochs x steps per
/// epoch). A cosine schedule without a total step count is an error at the
/// first step, not a silent constant rate.
template <class T>
class Pipeline {
 public:
  /// Duplicates `comm`, partitions deck.model over its ranks (collective),
  /// builds this rank's cell and optimizer. Throws InputError for a bad
  /// partition (identically on every rank).
  Pipeline(const Deck& deck, MPI_Comm comm);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// One synchronous step (all M micro-batches, then one optimizer update)
  /// on samples order[begin, begin + n) of `data` (1 <= n <= batch_size).
  /// Collective. Returns the loss sums of the n samples (valid on the last
  /// cell; see from_last()).
  LossSums step(const Dataset& data, const std::vector<std::int64_t>& order, std::int64_t begin,
                std::int64_t n);

  /// One step on caller arrays: inputs (n, input features) row-major float32
  /// and labels (n), host memory. Collective.
  LossSums step(const float* inputs, const std::int32_t* labels, std::int64_t n);

  /// Logits (n, classes), row-major, of inputs (n, input features), on every
  /// rank (Dropout off). Collective.
  std::vector<T> predict(const float* inputs, std::int64_t n);

  /// Forward-only evaluation of all of `data`; the result is valid on every
  /// rank. Collective.
  Evaluation evaluate(const Dataset& data);

  /// Sets the run's total step count, the horizon of the learning-rate
  /// schedule (cosine decays to 0 at this step); 0 = unknown. Not collective
  /// but every rank must set the same value.
  void set_total_steps(std::int64_t total_steps) { total_steps_ = total_steps; }
  std::int64_t total_steps() const { return total_steps_; }
  /// Steps per epoch of the run (recorded in checkpoints as the epoch; 0 =
  /// unknown, epoch 0).
  void set_steps_per_epoch(std::int64_t steps) { steps_per_epoch_ = steps; }
  /// Learning rate of the next step. Throws InputError for a cosine schedule
  /// without a total step count.
  double next_learning_rate() const;

  /// Optimizer steps for an epoch of `samples` samples: full batches, plus a
  /// last partial batch if it has at least micro_batches samples.
  std::int64_t steps_per_epoch(std::int64_t samples) const;

  /// `value` as the last cell holds it, on every rank. Collective.
  double from_last(double value) const;

  /// Writes the state (parameters, optimizer state, step) to `path`. Collective.
  void save_checkpoint(const std::string& path);
  /// Restores the state from `path`, written with any number of cells.
  /// Collective; throws InputError (see read_checkpoint) and changes nothing then.
  CheckpointInfo load_checkpoint(const std::string& path);

  /// All parameters of the model in layer order, gathered on rank 0 (empty
  /// elsewhere): the same layout for every partition. Collective.
  std::vector<T> gather_parameters() const;
  /// Activation bytes of every cell, gathered on all ranks. Collective.
  std::vector<std::int64_t> gather_activation_bytes() const;

  /// Parameters of the whole model (all cells).
  std::int64_t total_parameters() const;

  /// The recorder of this rank's timeline (records every deck.trace.every-th
  /// step when deck.trace.file is set).
  const Tracer& tracer() const { return tracer_; }

  const Deck& deck() const { return deck_; }
  /// The pipeline's own communicator (the duplicate), its rank and size.
  MPI_Comm comm() const { return comm_.get(); }
  int rank() const { return comm_.rank(); }
  int ranks() const { return comm_.size(); }
  const Partition& partition() const { return partition_; }
  const std::vector<double>& costs() const { return costs_; }
  Cell<T>& cell() { return *cell_; }
  const Cell<T>& cell() const { return *cell_; }
  std::int64_t steps_done() const { return steps_done_; }

 private:
  // Copies rows order[0..n) (identity if order is null) of inputs/labels into the batch buffers.
  void stage_batch(const float* inputs, std::int64_t features, const std::int32_t* labels,
                   const std::int64_t* order, std::int64_t n);
  LossSums step_staged(std::int64_t n);

  Deck deck_;
  Communicator comm_;
  Partition partition_;
  std::vector<double> costs_;
  std::unique_ptr<Cell<T>> cell_;
  std::unique_ptr<Optimizer<T>> optimizer_;
  Matrix<T> batch_inputs_;
  typename Matrix<T>::host_mirror_type batch_inputs_host_;
  LabelVector batch_labels_;
  typename LabelVector::host_mirror_type batch_labels_host_;
  std::int64_t steps_done_ = 0;
  std::int64_t total_steps_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  Tracer tracer_{0.0};
};

}  // namespace gpipe

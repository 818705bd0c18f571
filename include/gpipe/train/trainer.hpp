#pragma once
// Training a model described by a Deck with the GPipe pipeline on the ranks
// of an MPI communicator (one cell per rank).

#include <memory>
#include <ostream>
#include <vector>

#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/optim/optimizer.hpp"
#include "gpipe/pipeline/cell.hpp"

namespace gpipe {

struct Evaluation {
  double loss = 0;      ///< mean loss per sample
  double accuracy = 0;  ///< fraction of correct predictions
};

struct EpochReport {
  std::int64_t epoch = 0;  ///< 1-based
  double train_loss = 0;   ///< mean over the epoch's samples, as trained
  Evaluation test;
  double seconds = 0;      ///< training time of the epoch (evaluation excluded)
  double samples_per_second = 0;
};

/// Per-layer costs by which a partition is balanced.
/// "params": parameter count; "flops": forward+backward FLOPs for one
/// micro-batch; "time": measured forward+backward seconds for one micro-batch
/// (on rank 0, broadcast to all ranks).
template <class T>
std::vector<double> layer_costs(const ModelSpec& model, const std::string& mode,
                                std::int64_t micro_batch, MPI_Comm comm);

template <class T>
class Trainer {
 public:
  /// Partitions deck.model over the ranks of `comm` (collective), builds this
  /// rank's cell and optimizer. Throws InputError for a bad partition.
  Trainer(const Deck& deck, MPI_Comm comm);

  /// One synchronous step (all M micro-batches, then one optimizer update) on
  /// samples order[begin, begin + n) of `data`. Collective. Returns the loss
  /// sums (valid on the last rank).
  LossSums step(const Dataset& data, const std::vector<std::int64_t>& order, std::int64_t begin,
                std::int64_t n);

  /// One step on caller arrays: inputs (n, input features) row-major and
  /// labels (n), host memory. Collective.
  LossSums step(const float* inputs, const std::int32_t* labels, std::int64_t n);

  /// Logits (n, classes), row-major, of inputs (n, input features), on every
  /// rank (Dropout off). Collective.
  std::vector<T> predict(const float* inputs, std::int64_t n);

  /// Parameters of the whole model (all cells).
  std::int64_t total_parameters() const;

  /// Forward-only evaluation of all of `data`; the result is valid on every rank.
  Evaluation evaluate(const Dataset& data);

  /// Trains until deck.training.epochs epochs are complete (resuming from
  /// steps_done() after a restart), evaluating `test` after each epoch and
  /// writing checkpoints as deck.checkpoint asks. Rank 0 writes progress
  /// lines to `log` (may be null).
  std::vector<EpochReport> fit(const Dataset& train, const Dataset& test, std::ostream* log);

  /// Writes the state (parameters, optimizer state, step) to `path`. Collective.
  void save_checkpoint(const std::string& path);
  /// Restores the state from `path`, written with any number of cells.
  /// Collective; throws InputError (see read_checkpoint) and changes nothing then.
  CheckpointInfo load_checkpoint(const std::string& path);

  /// The recorder of this rank's timeline (records every deck.trace.every-th
  /// step when deck.trace.file is set).
  const Tracer& tracer() const { return tracer_; }

  /// All parameters of the model in layer order, gathered on rank 0 (empty
  /// elsewhere): the same layout for every partition. Collective.
  std::vector<T> gather_parameters() const;

  /// Activation bytes of every cell, gathered on all ranks. Collective.
  std::vector<std::int64_t> gather_activation_bytes() const;

  const Partition& partition() const { return partition_; }
  const std::vector<double>& costs() const { return costs_; }
  Cell<T>& cell() { return *cell_; }
  std::int64_t steps_done() const { return steps_done_; }
  std::int64_t steps_per_epoch(std::int64_t samples) const;

 private:
  // Copies rows order[0..n) (identity if order is null) of inputs/labels into the batch buffers.
  void stage_batch(const float* inputs, std::int64_t features, const std::int32_t* labels,
                   const std::int64_t* order, std::int64_t n);
  LossSums step_staged(std::int64_t n);

  Deck deck_;
  MPI_Comm comm_;
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

#pragma once
// The library-level pipeline: a model described by a Deck, trained on the
// ranks of a private duplicate of the caller's communicator arranged as a
// D x K grid (D data-parallel replicas of a K-cell pipeline; D = 1 by
// default), with its optimizer and batch staging. It runs one step,
// prediction or evaluation per call; the epoch loop lives in train/driver.hpp.

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/layers/tied.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/optim/loss_scale.hpp"
#include "gpipe/optim/optimizer.hpp"
#include "gpipe/parallel/gradient_reducer.hpp"
#include "gpipe/parallel/grid.hpp"
#include "gpipe/pipeline/cell.hpp"
#include "gpipe/pipeline/trace.hpp"
#include "gpipe/pipeline/transport.hpp"
#include "gpipe/train/restart.hpp"

namespace gpipe {

struct Evaluation {
  double loss = 0;      ///< mean loss per sample (in the units the model trains in)
  double accuracy = 0;  ///< classification: fraction of correct predictions (of tokens, token_cross_entropy)
  /// Regression losses: RMSE, MAE, R^2 per output and overall, in the
  /// data's units (target normalization undone); empty for classification.
  RegressionMetrics regression;
  /// False if any output was NaN or infinite (the loss is then not finite):
  /// no figure is a valid result.
  bool finite() const;
};

/// GPipe training of deck.model on the ranks of `comm`.
///
/// Communicators: the constructor duplicates `comm` once (MPI_Comm_dup, freed
/// by the destructor); every collective and point-to-point call of the
/// pipeline runs on that duplicate or on the grid's communicators split from
/// it (parallel/grid.hpp), never on `comm` itself, so the caller's own
/// messages cannot collide with gpipe's.
///
/// Data parallelism (deck.parallel): D = ranks / K replicas. A step's global
/// mini-batch of n samples is split into D contiguous shards (sizes differ by
/// at most one); replica r trains shard r in M micro-batches; the gradient
/// is that of the mean loss over all n samples, summed over the replica
/// group bucket by bucket during the last backward micro-batch
/// (GradientReducer) before the optimizer step, so every replica holds the
/// same weights after every step. Every rank must pass the same n and the
/// same samples (each rank reads only its shard's rows).
///
/// Learning rate: a function of training progress. With set_total_samples()
/// (the driver sets it to epochs x training samples) the rate of a step is
/// learning_rate(deck.optimizer, s, total_samples()), s the samples trained
/// before it (position(): epoch x training samples + the epoch's samples),
/// so a restart with another batch size, D, K, M or rank count continues the
/// same curve. Otherwise (library and C API users stepping themselves) it is
/// learning_rate(deck.optimizer, step, total_steps()) over a total step
/// count set with set_total_steps(). A cosine schedule with neither is an
/// error at the first step, not a silent constant rate.
template <class T>
class Pipeline {
 public:
  /// Checks the grid (grid_shape: throws InputError before any
  /// communication), duplicates `comm`, splits it into the grid, partitions
  /// deck.model over K cells (collective), builds this rank's cell, optimizer
  /// and gradient reducer. Throws InputError for a bad grid or partition
  /// (identically on every rank).
  Pipeline(const Deck& deck, MPI_Comm comm);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Failures: the arguments are validated and staged on every rank and the
  /// outcome, and n, agreed collectively before any other communication: a
  /// bad argument on any rank (or different n on different ranks) throws
  /// InputError on every rank and leaves the pipeline usable. A failure after
  /// communication has started cancels and frees what this rank posted,
  /// rethrows, and poisons the pipeline: every later collective call throws
  /// StateError (another rank may then be blocked: such failures, e.g. an MPI
  /// error, are not recoverable in MPI).
  ///
  /// One synchronous step (all M micro-batches, then one optimizer update)
  /// on samples order[begin, begin + n) of `data` (D x M <= n <= batch_size).
  /// Collective. Returns the loss sums of all n samples (valid on the last
  /// cell of every replica; see from_last()). Before the update, the loss and
  /// every (reduced) gradient are checked for NaN and infinity, and all ranks
  /// agree (one MPI_Allreduce of two ints) so all take the same decision, per
  /// deck.training.nonfinite: abort throws AgreedError<PipelineError> on
  /// every rank naming the step, the cell and the first layer with a
  /// non-finite gradient, the parameters unchanged; skip_step leaves the
  /// parameters and optimizer state unchanged (the step still counts, see
  /// skipped_steps()); ignore applies the update.
  LossSums step(const Dataset& data, const std::vector<std::int64_t>& order, std::int64_t begin,
                std::int64_t n);

  /// One step on caller arrays: inputs (n, input features) row-major float32
  /// and labels (n) (for token_cross_entropy (n, T) row-major: the next token
  /// id of each input token), host memory, already normalized. Collective. Throws
  /// InputError for a regression loss (pass float targets).
  LossSums step(const float* inputs, const std::int32_t* labels, std::int64_t n);
  /// One step with float targets (n, outputs) row-major (regression losses:
  /// model.loss mse, mae or huber), inputs and targets already normalized.
  /// Collective. Throws InputError for softmax_cross_entropy (pass labels).
  LossSums step(const float* inputs, const float* targets, std::int64_t n);

  /// Outputs (n, outputs) row-major of the last layer (class logits, or
  /// regression values) for inputs (n, input features) row-major in the
  /// data's own units, on every rank (Dropout off; any 1 <= n <=
  /// training.batch_size). The inputs are normalized with normalization()
  /// first and regression outputs de-normalized (y = out * target_std +
  /// target_mean), so a model loaded from a checkpoint predicts in the units
  /// of its training data; with the default (identity) normalization the
  /// arrays pass through unchanged. Micro-batched and pipelined over the K
  /// cells; each replica computes a shard. Collective.
  std::vector<T> predict(const float* inputs, std::int64_t n);

  /// The input/target normalization predict() applies and checkpoints
  /// store. Collective: the input part is taken from the first cell of
  /// replica 0 and the target part from its last cell (the ranks that read
  /// inputs and targets), so other ranks may pass anything.
  void set_normalization(const NormalizationStats& stats);
  const NormalizationStats& normalization() const { return normalization_; }

  /// Forward-only evaluation of all of `data`; the result is valid on every
  /// rank. Collective.
  Evaluation evaluate(const Dataset& data);

  /// Sets the run's total step count, the horizon of the learning-rate
  /// schedule (cosine decays to 0 at this step); 0 = unknown. Not collective
  /// but every rank must set the same value.
  void set_total_steps(std::int64_t total_steps) { total_steps_ = total_steps; }
  std::int64_t total_steps() const { return total_steps_; }
  /// Sets the run's total training samples (epochs x samples per epoch), the
  /// horizon of the learning-rate schedule in samples (see the class
  /// comment); 0 = unset (the schedule runs in steps). Not collective but
  /// every rank must set the same value.
  void set_total_samples(std::int64_t total_samples) { total_samples_ = total_samples; }
  std::int64_t total_samples() const { return total_samples_; }
  /// Training samples before the next step: position().epoch x the training
  /// set's samples + position().epoch_samples.
  std::int64_t samples_done() const {
    return position_.epoch * train_samples_ + position_.epoch_samples;
  }
  /// The learning rate the last step used (0 before the first step).
  double last_learning_rate() const { return last_learning_rate_; }
  /// Steps per epoch of the run (recorded in checkpoints as the epoch; 0 =
  /// unknown, epoch 0).
  void set_steps_per_epoch(std::int64_t steps) { steps_per_epoch_ = steps; }
  /// Learning rate of the next step. Throws InputError for a cosine schedule
  /// without a total step count.
  double next_learning_rate() const;

  /// Optimizer steps for an epoch of `samples` samples: full batches, plus a
  /// last partial batch if it has at least D x micro_batches samples.
  std::int64_t steps_per_epoch(std::int64_t samples) const;
  /// Samples of an epoch of `samples` that no step trains: a last partial
  /// batch of fewer than D x micro_batches samples (every replica's shard
  /// needs one sample per micro-batch), else 0. They are the last ones of the
  /// epoch's sample order; the driver says so before the first step.
  std::int64_t untrained_per_epoch(std::int64_t samples) const {
    const std::int64_t tail = samples % deck_.training.batch_size;
    return tail < min_step_samples() ? tail : 0;
  }

  /// `value` as the last cell of replica 0 holds it, on every rank. Collective.
  double from_last(double value) const;
  /// As from_last(double), for a vector (its size as the last cell holds it).
  std::vector<double> from_last(std::vector<double> values) const;

  /// Writes the state (parameters, optimizer state, step, run identity, data
  /// position) to `path`: one copy, written by replica 0's pipeline (the
  /// replicas are identical). Collective. Throws AgreedError<PipelineError>
  /// on every rank, writing nothing, if any parameter or optimizer state is
  /// NaN or infinite (naming the cell and layer); an error on any rank while
  /// writing is thrown as InputError on every rank (see write_checkpoint).
  void save_checkpoint(const std::string& path);
  /// Restores the state from `path`, written with any grid (D, K); every
  /// replica reads it, and the run continues (run_id(), position()).
  /// Collective; throws InputError (see read_checkpoint) on every rank if any
  /// rank fails.
  CheckpointInfo load_checkpoint(const std::string& path);

  /// Steps whose update was skipped for non-finite values (nonfinite:
  /// skip_step), including the fp16 loss scaler's overflow steps.
  std::int64_t skipped_steps() const { return skipped_steps_; }
  /// The run's precision policy (deck `precision`, gpipe/core/precision.hpp).
  const Precision& precision() const { return precision_; }
  /// The dynamic loss scaler (precision fp16; otherwise scale 1, never
  /// updated). The same on every rank.
  const LossScaler& loss_scaler() const { return scaler_; }
  /// Test hook: the next training step writes +inf into this rank's first
  /// gradient after its backward pass (an overflow on this cell alone), so
  /// tests can check that every rank agrees to skip the step. Not collective.
  void inject_gradient_overflow() { inject_overflow_ = true; }
  /// False if the last step's loss or a gradient was not finite on some rank.
  bool last_step_finite() const { return last_step_finite_; }
  /// The global L2 norm of the last step's gradients before clipping
  /// (optimizer.clip_norm > 0; 0 until a step clips). The same on every rank.
  double last_gradient_norm() const { return last_gradient_norm_; }
  /// False if the last step's update was skipped (nonfinite: skip_step).
  bool last_step_applied() const { return last_step_applied_; }
  /// This run's identity: new per Pipeline (drawn on rank 0), or that of the
  /// checkpoint load_checkpoint() restored (the run continues); it names the
  /// run's checkpoint files (checkpoint_path).
  const std::string& run_id() const { return run_id_; }
  /// Where training stands in the data (on every rank). Advanced by the
  /// driver, set by set_position() (e.g. from restart_position() after
  /// load_checkpoint()); written into checkpoints.
  const DataPosition& position() const { return position_; }
  void set_position(const DataPosition& p) { position_ = p; }
  /// Samples of the training set (recorded in checkpoints; 0 = unknown).
  void set_train_samples(std::int64_t samples) { train_samples_ = samples; }
  /// The fewest samples one step takes: D x M (every replica's shard needs
  /// a sample per micro-batch).
  std::int64_t min_step_samples() const {
    return std::int64_t(shape_.replicas) * deck_.training.micro_batches;
  }

  /// All parameters of the model in layer order (a tied lm_head's weight once, as its token_embedding's:
  /// total_parameters() values), gathered on the first cell of every replica, rank 0 included (empty
  /// elsewhere): the same layout for every partition, grid and schedule. Collective.
  std::vector<T> gather_parameters() const;
  /// Activation bytes of each of the K cells (index = cell), on all ranks.
  /// Collective.
  std::vector<std::int64_t> gather_activation_bytes() const;
  /// Payload bytes of the boundary messages (activations forward, gradients
  /// backward) each of the K cells sent in the last training step (index =
  /// cell, replica 0's; 0 before the first step), at the wire format's size
  /// (2 bytes a value for bf16 / fp16: exactly half of float). On all ranks.
  /// Collective.
  std::vector<std::int64_t> gather_boundary_bytes() const;
  /// True on every rank if every replica of every cell holds bitwise the
  /// same parameters and optimizer state (a 64-bit checksum compared over
  /// each replica group). Collective. Debug builds check it after every step.
  bool replicas_identical() const;

  /// Parameters of the whole model (all cells), a tied lm_head's weight counted once (its token_embedding's).
  std::int64_t total_parameters() const;

  /// The recorder of this rank's timeline (records every deck.trace.every-th
  /// step when deck.trace.file is set).
  const Tracer& tracer() const { return tracer_; }

  const Deck& deck() const { return deck_; }
  /// The pipeline's own communicator (the duplicate), its rank and size.
  MPI_Comm comm() const { return comm_.get(); }
  int rank() const { return comm_.rank(); }
  int ranks() const { return comm_.size(); }
  /// The D x K grid and this rank's place in it.
  const GridShape& grid() const { return shape_; }
  int replica() const { return grid_.replica(); }
  const Partition& partition() const { return partition_; }
  const std::vector<double>& costs() const { return costs_; }
  Cell<T>& cell() { return *cell_; }
  const Cell<T>& cell() const { return *cell_; }
  std::int64_t steps_done() const { return steps_done_; }

 private:
  void refresh_weight_copy();  // the bf16 weight copy (kernels::WeightCopy) before a pass
  // Copies this replica's shard of rows order[0..n) (identity if order is
  // null) of inputs/labels into the batch buffers; returns the shard.
  // Regression: the rows of `targets` (n, outputs) instead of labels.
  // normalize: apply normalization_ to the inputs (predict).
  MicroBatch stage_batch(const float* inputs, std::int64_t features, const std::int32_t* labels,
                         const float* targets, const std::int64_t* order, std::int64_t n,
                         bool normalize = false);
  // predict() of n <= batch_size samples into result (n, outputs).
  void predict_chunk(const float* inputs, std::int64_t n, T* result);
  // The staged targets the loss reads: labels or float target rows.
  Targets<T> staged_targets() const;
  LossSums step_staged(std::int64_t n, const MicroBatch& shard);
  std::vector<T> predict_staged(std::int64_t n, const MicroBatch& shard);
  // Validates and stages a batch (stage() returns the shard) on every rank,
  // agrees on the outcome and on n (agree_on_batch), then returns run(shard);
  // a failure in run poisons the pipeline.
  template <class Stage, class Run>
  auto agreed(std::int64_t n, const char* what, Stage&& stage, Run&& run);
  // Throws InputError for a training batch the grid cannot split or a cosine
  // schedule without a total step count.
  void check_train_batch(std::int64_t n) const;
  // Throws InputError on every rank if `error` is non-empty on any rank or
  // the ranks' n differ. Collective.
  void agree_on_batch(const std::string& error, std::int64_t n, const char* what) const;
  // Throws StateError if an earlier call failed mid-way.
  void check_usable() const;
  // Sums loss sums over the replica group on the last cells (D > 1).
  LossSums sum_over_replicas(LossSums sums) const;
  // Throws InputError on every rank if `error` is non-empty on any (a message
  // naming the other replica where this one succeeded).
  void agree(const std::string& error, const std::string& what) const;
  std::uint64_t checksum() const;
  // The training.nonfinite check of one step (collective unless ignore):
  // true if the update is to be applied; throws for abort.
  bool check_finite(const LossSums& sums);
  // Global index of the first layer of this cell with a non-finite value in
  // `values` (laid out as the cell's parameters), or -1.
  int first_nonfinite_layer(const Vector<T>& values) const;
  // Tied embeddings (layers/tied.hpp): the index of global `layer` among this
  // cell's layers (-1: another cell's), the cell holding it, its slice of a
  // flat buffer of this cell (the gradients' or the values' layout, by the
  // buffer's length), and the swap of such slices with the other tied cell
  // into tied_peer_. With the head and the embedding on one rank they are one
  // matrix (Runner::shares_tied_weight): share_tied_weights does nothing and
  // tie_gradients adds the head's gradient slot into dE. On two cells
  // share_tied_weights copies E and its optimizer state into the head's
  // (collective over the two cells) and tie_gradients gives both dE + dW.
  // without_tied_head / with_tied_head drop / re-insert (as zeros) a tied
  // head's slice of a host copy of a values-layout buffer, so checkpoints and
  // gather_parameters hold the matrix once. value_gradients is gradients()
  // in the values' layout (the optimizer's).
  int local_layer(int layer) const;
  int cell_of(int layer) const;
  Kokkos::View<T*, MemSpace> layer_slice(const Vector<T>& values, int layer) const;
  Vector<T> value_gradients() const;
  void exchange_tied(const Kokkos::View<T*, MemSpace>& mine, int peer_cell);
  std::vector<Vector<T>> tied_value_buffers() const;
  void share_tied_weights();
  void tie_gradients();
  std::vector<T> without_tied_head(std::vector<T> values) const;
  std::vector<T> with_tied_head(std::vector<T> values) const;
  static constexpr int kTieTag = 0x7e1;
  // optimizer.clip_norm: scales this cell's gradients by the factor of the
  // model's global gradient norm (optim/clip.hpp). Collective over the pipeline.
  void clip_gradients();
  // "layer 3 (dense) in cell 1"
  std::string where_layer(int layer) const;

  Deck deck_;
  GridShape shape_;
  Communicator comm_;
  Grid grid_;
  Partition partition_;
  std::vector<double> costs_;
  std::unique_ptr<Cell<T>> cell_;
  std::unique_ptr<Optimizer<T>> optimizer_;
  std::unique_ptr<GradientReducer<T>> reducer_;  // D > 1
  Matrix<T> batch_inputs_;
  typename Matrix<T>::host_mirror_type batch_inputs_host_;
  LabelVector batch_labels_;
  typename LabelVector::host_mirror_type batch_labels_host_;
  Matrix<T> batch_targets_;  // regression, last cell: (shard, outputs)
  typename Matrix<T>::host_mirror_type batch_targets_host_;
  bool regression_ = false;
  std::int64_t outputs_ = 0;
  std::int64_t labels_per_sample_ = 1;  // T for token_cross_entropy
  double last_gradient_norm_ = 0;
  TiedLayers tied_;
  Kokkos::View<T*, MemSpace> tied_peer_;  // the other tied cell's V x d slice (allocated once)
  typename Kokkos::View<T*, MemSpace>::HostMirror tied_peer_host_, tied_send_host_;
  NormalizationStats normalization_;
  std::int64_t steps_done_ = 0;
  std::int64_t total_steps_ = 0;
  std::int64_t total_samples_ = 0;
  double last_learning_rate_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  std::string poisoned_;  // why the pipeline is unusable ("" = usable)
  std::int64_t skipped_steps_ = 0;
  Precision precision_;
  LossScaler scaler_;
  bool inject_overflow_ = false;
  kernels::WeightCopy weight_copy_;  // bf16 copy of the cell's weights, refreshed before each pass
  std::int64_t last_boundary_bytes_ = 0;  // sent by this cell in the last training step
  bool last_step_finite_ = true;
  bool last_step_applied_ = true;
  std::string run_id_;
  DataPosition position_;
  std::int64_t train_samples_ = 0;
  Tracer tracer_;
};

}  // namespace gpipe

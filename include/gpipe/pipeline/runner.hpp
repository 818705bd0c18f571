#pragma once
// The runner: one rank's stages (pipeline/stage.hpp) and the generic op loop
// that executes any Schedule whose per-rank op lists name global stages.

#include <functional>
#include <memory>
#include <vector>

#include "gpipe/pipeline/stage.hpp"

namespace gpipe {

/// Rank `comm.rank()` of a `comm.size()`-rank pipeline over `model`,
/// running the stages the training schedule (training_schedule(options,
/// comm.size())) maps to it: stage s of `partition` (over the schedule's
/// stages; layers [partition.first_layer(s), +partition.counts[s])) runs on
/// rank schedule.rank_of_stage[s]. With one stage per rank (fill_drain,
/// 1f1b, zero_bubble) it is one contiguous layer range, the classic cell.
///
/// Data flow: stage 0 reads micro-batches from the mini-batch inputs the
/// caller passes; the last stage reads the targets the caller passes (labels
/// or float target rows, as model.loss needs) and computes the loss
/// (make_loss(model.loss), chosen once); ranks without them ignore those
/// arguments (pass empty Views). Stage s's output goes to stage s + 1 and
/// its input gradient to stage s - 1 with MPI_Isend/MPI_Irecv, tagged from
/// (stage, micro-batch, direction) (transport.hpp); two consecutive stages on
/// one rank hand off by a message to the rank itself (no link emulated).
/// With options.link enabled, every message between two ranks is delivered
/// no earlier than its arrival on the emulated link (one Wire per peer rank
/// and direction). Each receive is posted as soon as the buffer-plan slot it
/// goes into is free (pipeline/buffer_plan.hpp), so transfers overlap
/// compute without more buffers than the plan has.
///
/// The rank's parameters (and gradients, state) are one flat buffer: its
/// stages' layers in stage order (= increasing global layer order), each
/// layer's tensors in parameter_specs() order. The constructor is
/// collective over `comm` (MPI_Comm_dup) and throws InputError for a
/// partition or schedule that does not fit (naming the field).
template <class T>
class Runner {
 public:
  Runner(const ModelSpec& model, const Partition& partition, MPI_Comm comm, const CellOptions& options);

  /// One training step (the training schedule) on a mini-batch of n <= max_batch samples.
  /// inputs: (n, model.input_features) where stage 0 runs; targets where the
  /// last stage runs: labels (n) or values (n, outputs). Adds dL/dparameters,
  /// with L the mean loss over the n samples, to gradients() (call
  /// zero_gradients() first). step keys Dropout. Returns the loss sums on
  /// the last stage's rank, zeros elsewhere. Collective over the pipeline;
  /// throws InputError for bad sizes (before any traffic) and PipelineError
  /// for a failed or mismatched message (after abandoning what it posted).
  /// With a `placement`, the n samples are samples [offset, offset + n) of a
  /// global mini-batch of global_size: the gradient is that of the mean loss
  /// over global_size samples and Dropout masks use global sample indices,
  /// so they do not depend on how the global batch is sharded.
  LossSums train_step(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n,
                      std::uint64_t step, const BatchPlacement& placement = {});

  /// Called during train_step right after local layer l's last gradient
  /// pass of the step: from then on layer l's gradients are final (data
  /// parallelism starts their reduction there); announced in descending local
  /// layer order. Null: none.
  void set_gradient_ready(std::function<void(int layer)> callback) { state_.gradient_ready = std::move(callback); }
  /// Where each local layer's gradients start in gradients(), in local layer
  /// order; the last entry is the total (size layers + 1). Also where its
  /// values start in parameters(), unless shares_tied_weight().
  std::vector<std::int64_t> parameter_offsets() const;
  /// Where each local layer's values start in parameters() (size layers + 1,
  /// the last entry parameters().extent(0)): parameter_offsets() except that
  /// a tied lm_head sharing this rank's token_embedding holds none.
  std::vector<std::int64_t> value_offsets() const;
  /// The local index of a tied lm_head whose token_embedding is on this rank
  /// too (layers/tied.hpp), or -1. Such a head and its embedding are one
  /// matrix: the head's values are the embedding's (parameters() holds them
  /// once, initialized by the embedding), while the head's gradient keeps its
  /// own V x d slot, the last of gradients(): gradients() is parameters()'s
  /// layout followed by that slot, and Pipeline sums it into the
  /// embedding's gradient before the update (docs/design.md, "Language
  /// model"). The constructor throws InputError (naming the head's deck
  /// position and the rank) when a layer with parameters follows such a head
  /// on its rank.
  int shared_tied_head() const { return shared_head_; }
  bool shares_tied_weight() const { return shared_head_ >= 0; }

  /// Forward-only pass (Dropout off) through the pipeline; loss sums (and
  /// correct predictions or regression moments) on the last stage's rank,
  /// zeros elsewhere. Collective.
  LossSums evaluate(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n);

  /// Forward-only pass (Dropout off); the last stage writes the last layer's
  /// outputs (logits, or regression values) of the n samples into `logits`
  /// (n, outputs); other ranks ignore it. Collective.
  void predict(ConstMatrix<T> inputs, std::int64_t n, Matrix<T> logits);

  /// Sets the gradients to zero. Lazily: the next train_step's first
  /// backward of each layer that writes_gradients() writes its gradients
  /// instead of adding them (the weight-gradient GEMM with beta = 0, no
  /// zeroing pass); the other layers' gradients are zeroed at that step's
  /// start, and gradients() zeroes them all if it is called first.
  void zero_gradients() { zero_pending_ = true; }
  /// This rank's parameters and gradients (see the class comment; with
  /// shares_tied_weight(), gradients() is longer by the head's V x d slot).
  Vector<T> parameters() const { return params_; }
  Vector<T> gradients() const;
  /// The layers' non-trainable state (running statistics), one flat buffer
  /// in local layer order, each layer's tensors in shape().state order.
  Vector<T> state() const { return layer_state_; }
  /// This rank's layers in local order (its stages' layers in stage order).
  const std::vector<std::unique_ptr<Layer<T>>>& layers() const { return layers_; }
  /// The global index of local layer `local`; the local index of global
  /// `layer` (-1: another rank's).
  int global_layer(int local) const { return global_layers_.at(size_t(local)); }
  int local_layer(int layer) const;
  /// The global indices of this rank's layers, increasing.
  const std::vector<int>& global_layers() const { return global_layers_; }
  /// The rank that runs global layer `layer`.
  int rank_of_layer(int layer) const;

  int rank() const { return comm_.rank(); }
  int cells() const { return comm_.size(); }
  /// True where stage 0 runs (the rank reads the mini-batch inputs).
  bool reads_inputs() const { return local_of_stage_.front() >= 0; }
  /// True where the last stage runs (the rank reads the targets, computes the loss).
  bool computes_loss() const { return local_of_stage_.back() >= 0; }
  /// The classic names: reads_inputs() and computes_loss().
  bool is_first() const { return reads_inputs(); }
  bool is_last() const { return computes_loss(); }
  /// The rank of stage 0 and the rank of the last stage.
  int first_rank() const { return train_schedule_.rank_of_stage.front(); }
  int last_rank() const { return train_schedule_.rank_of_stage.back(); }
  /// The execution-space instance the rank's work runs on (CellOptions::space).
  const ExecSpace& execution_space() const { return options_.space; }
  MPI_Comm comm() const { return comm_.get(); }
  /// The training schedule (its stage map included).
  const Schedule& schedule() const { return train_schedule_; }
  const Partition& partition() const { return partition_; }
  const std::vector<std::unique_ptr<Stage<T>>>& stages() const { return stages_; }

  /// Bytes of activation storage this rank allocates for a step: the sum of
  /// its stages' (Stage::activation_bytes; docs/design.md, "Activation memory").
  std::int64_t activation_bytes() const { return activation_bytes_; }

  /// Records the rank's operations into `tracer` (null: no tracing) during
  /// the steps the tracer is recording.
  void set_tracer(Tracer* tracer) { state_.tracer = tracer; }
  /// The loss scale S of the next training steps (dynamic loss scaling,
  /// gpipe/optim/loss_scale.hpp): the loss gradient is S * dL/doutputs, so
  /// every gradient of the step is scaled by S (1, the default, leaves them
  /// bitwise unchanged).
  void set_loss_scale(double scale) { state_.loss_scale = scale; }

  /// [op + 1]: the (local stage, micro-batch) pairs whose receives are
  /// posted after op (index 0: before the first op).
  using Posts = std::vector<std::vector<std::pair<int, int>>>;
  /// The posts of `schedule` on this rank with `plans` (one per local stage).
  Posts receive_posts(const Schedule& schedule, const std::vector<CellBufferPlan>& plans) const;
  /// Runs this rank's ops of `schedule` with `plans` and `posts`; on an
  /// exception, abandons every posted operation and rethrows.
  LossSums run(const Schedule& schedule, const std::vector<CellBufferPlan>& plans, const Posts& posts,
               ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n, std::uint64_t step,
               bool training);
  /// Cancels and frees every posted operation (a step that threw).
  void abandon() noexcept;

 private:
  // Carries out a pending zero_gradients() at a training step's start.
  void begin_gradients();
  LossSums run_posted(const std::vector<Op>& ops, const Posts& posts);
  LossSums forward_only_run(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n);

  Communicator comm_;
  CellOptions options_;
  Partition partition_;
  Schedule train_schedule_;
  std::vector<CellBufferPlan> train_plans_;  // [local stage]
  Posts train_posts_;
  std::vector<int> local_of_stage_;  // [stage] index into stages_ (-1: another rank's)
  std::vector<int> global_layers_;   // [local layer] global index
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  Vector<T> params_, grads_, layer_state_;
  int shared_head_ = -1;  // shared_tied_head()
  std::vector<Wire> wires_;          // [peer rank] emulated link towards it
  StepState<T> state_;
  std::vector<std::unique_ptr<Stage<T>>> stages_;
  std::int64_t activation_bytes_ = 0;
  mutable bool zero_pending_ = false;  // zero_gradients() called, not yet carried out
};

/// Bytes of activation storage rank `cell` allocates for the training
/// schedule of `options` (training_schedule(options, K), K =
/// custom_schedule.cells or partition.cells() / options.chunks) with
/// `partition` over its stages: the sum of stage_activation_bytes over the
/// rank's stages, exactly what Runner::activation_bytes() reports, from the
/// shape pass alone (no Kokkos, no MPI), so `gpipe-train --check` can print it.
std::int64_t cell_activation_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                   int cell, const CellOptions& options, std::int64_t scalar_bytes);

}  // namespace gpipe

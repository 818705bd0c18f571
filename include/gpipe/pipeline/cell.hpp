#pragma once
// A cell (pipeline stage): a contiguous run of a model's layers on one MPI
// rank, with the buffers and the generic runner that executes a Schedule.

#include <functional>
#include <memory>
#include <vector>

#include "gpipe/core/precision.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/loss/loss.hpp"
#include "gpipe/model/partition.hpp"
#include "gpipe/pipeline/buffer_plan.hpp"
#include "gpipe/pipeline/micro_batch.hpp"
#include "gpipe/pipeline/schedule.hpp"
#include "gpipe/pipeline/trace.hpp"
#include "gpipe/pipeline/transport.hpp"

namespace gpipe {

struct CellOptions {
  std::int64_t max_batch = 1;  ///< largest mini-batch N any step will see
  int micro_batches = 1;       ///< M
  Remat remat = Remat::Never;
  ScheduleKind schedule = ScheduleKind::FillDrain;  ///< the training schedule
  std::uint64_t seed = 0;      ///< initialization and Dropout seed
  LinkModel link;              ///< emulated link between cells (off by default; the same on every rank)
  /// The execution-space instance every kernel and copy of the cell runs on;
  /// the cell fences this instance, never all of Kokkos, before MPI.
  ExecSpace space{};
  /// The activation and wire format (the precision policy's wire,
  /// gpipe/core/precision.hpp): fp32 for float cells, fp64 for double. bf16 /
  /// fp16 (float cells only): every layer's output and input gradient is
  /// rounded to it in place (round_activations) and boundary messages go as
  /// 16-bit values (BoundaryBuffer::set_wire_format), losslessly, so results
  /// are bitwise the same whatever the partition.
  Format wire = Format::fp32;
};

/// Bytes of activation storage that cell `cell` of `partition` allocates for
/// the buffer plan of options.schedule (micro-batches of ceil(max_batch / M)
/// rows of `scalar_bytes`-byte values; `shapes` from model_shapes): exactly
/// what Cell::activation_bytes() reports, from the shape pass alone (no
/// Kokkos, no MPI), so `gpipe-train --check` can print it.
std::int64_t cell_activation_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                   int cell, const CellOptions& options, std::int64_t scalar_bytes);

/// True when a training step of `options` computes the weight gradients of
/// the layers whose Layer::whole_batch_weights() is true (Dense) once over
/// the whole mini-batch after the last backward (one GEMM of N rows instead
/// of M of N/M; docs/design.md, "Whole-batch W"): fill_drain, M > 1, no
/// re-materialization (which would have to keep every layer input again).
bool uses_batch_weights(const CellOptions& options);
/// The bytes the whole-batch W adds to cell_activation_bytes: max_batch x
/// (the output widths of the cell's whole_batch_weights layers, summed, for
/// their output gradients + the widest of their inputs, for the stacked
/// input; every input with re-materialization; the first cell's first layer
/// reads the mini-batch itself) x scalar_bytes; 0 unless uses_batch_weights(options).
std::int64_t batch_weight_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                int cell, const CellOptions& options, std::int64_t scalar_bytes);

/// Where a cell's mini-batch sits in a larger global mini-batch (data
/// parallelism: each replica trains a shard of it).
struct BatchPlacement {
  std::int64_t offset = 0;       ///< global index of the first sample (keys Dropout)
  std::int64_t global_size = 0;  ///< N of the loss mean, 1/N (0: the cell's own n)
};

/// Cell `comm.rank()` of a `comm.size()`-cell pipeline over `model`,
/// holding layers [partition.first_layer(rank), +partition.counts[rank]).
///
/// Data flow: the first cell reads micro-batches from the mini-batch inputs
/// the caller passes; the last cell reads the targets the caller passes
/// (labels or float target rows, as model.loss needs) and computes the loss
/// (make_loss(model.loss), chosen once here); other cells ignore those
/// arguments (pass empty Views).
/// Boundary activations go forward and their gradients backward with
/// MPI_Isend/MPI_Irecv. With options.link enabled, every message is
/// delivered no earlier than its arrival on the emulated link (one Wire per
/// direction; the data moves at once, the receiver holds until then in a
/// link_wait event and records the message's wire event). Each receive is posted as soon as the buffer-plan
/// slot it goes into is free (pipeline/buffer_plan.hpp), so transfers
/// overlap compute without more buffers than the plan has.
///
/// All buffers are the slots of the training schedule's buffer plan,
/// allocated in the constructor for micro-batches of up to ceil(max_batch /
/// M) rows; a training step allocates nothing.
template <class T>
class Cell {
 public:
  Cell(const ModelSpec& model, const Partition& partition, MPI_Comm comm,
       const CellOptions& options);

  /// One training step (options.schedule) on a mini-batch of n <= max_batch samples.
  /// inputs: (n, model.input_features) on the first cell; targets on the
  /// last: labels (n) or values (n, outputs). Adds dL/dparameters, with L the mean loss over the n samples, to
  /// gradients() (call zero_gradients() first). step keys Dropout.
  /// Returns the loss sums on the last cell, zeros elsewhere.
  /// With a `placement`, the n samples are samples [offset, offset + n) of a
  /// global mini-batch of global_size: the gradient is that of the mean loss
  /// over global_size samples and Dropout masks use global sample indices,
  /// so they do not depend on how the global batch is sharded.
  LossSums train_step(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n,
                      std::uint64_t step, const BatchPlacement& placement = {});

  /// Called during train_step right after local layer l's backward of the
  /// last micro-batch this cell's schedule runs backward: from then on layer
  /// l's gradients are final for the step (data parallelism starts their
  /// reduction there). Null: none.
  void set_gradient_ready(std::function<void(int layer)> callback) {
    gradient_ready_ = std::move(callback);
  }
  /// Where each local layer's parameters (and gradients) start in the flat
  /// buffers, in layer order; the last entry is the total (size layers + 1).
  std::vector<std::int64_t> parameter_offsets() const;

  /// Forward-only pass (Dropout off) through the pipeline; loss sums (and
  /// correct predictions or regression moments) on the last cell, zeros elsewhere.
  LossSums evaluate(ConstMatrix<T> inputs, const Targets<T>& targets, std::int64_t n);

  /// Forward-only pass (Dropout off); the last cell writes the last layer's
  /// outputs (logits, or regression values) of the n samples into `logits`
  /// (n, outputs); other cells ignore it.
  void predict(ConstMatrix<T> inputs, std::int64_t n, Matrix<T> logits);

  /// Sets the gradients to zero. Lazily: the next train_step's first
  /// backward of each layer that writes_gradients() writes its gradients
  /// instead of adding them (the weight-gradient GEMM with beta = 0, no
  /// zeroing pass); the other layers' gradients are zeroed at that step's
  /// start, and gradients() zeroes them all if it is called first.
  void zero_gradients() { zero_pending_ = true; }
  /// This cell's parameters and gradients: one flat buffer each, the layers'
  /// tensors concatenated in layer order, each in its parameter_specs() order.
  Vector<T> parameters() const { return params_; }
  Vector<T> gradients() const;
  /// The layers' non-trainable state (running statistics), one flat buffer
  /// in layer order, each layer's tensors in shape().state order.
  Vector<T> state() const { return state_; }
  const std::vector<std::unique_ptr<Layer<T>>>& layers() const { return layers_; }

  int rank() const { return comm_.rank(); }
  int cells() const { return comm_.size(); }
  bool is_first() const { return rank() == 0; }
  /// The execution-space instance the cell's work runs on (CellOptions::space).
  const ExecSpace& execution_space() const { return options_.space; }
  bool is_last() const { return rank() == cells() - 1; }
  MPI_Comm comm() const { return comm_.get(); }
  int first_layer() const { return first_layer_; }

  /// Bytes of activation storage this cell allocates for a step, from its
  /// buffer plan (planned_bytes): micro-batch inputs, kept layer outputs and
  /// the layers' saved state (re-materialization slots included), and the
  /// cell-output buffers (see docs/design.md, "Activation memory").
  std::int64_t activation_bytes() const { return activation_bytes_; }

  /// Records the cell's operations into `tracer` (null: no tracing) during
  /// the steps the tracer is recording.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  /// The loss scale S of the next training steps (dynamic loss scaling,
  /// gpipe/optim/loss_scale.hpp): the last cell's loss gradient is
  /// S * dL/doutputs, so every gradient of the step is scaled by S
  /// (1, the default, leaves them bitwise unchanged).
  void set_loss_scale(double scale) { loss_scale_ = scale; }

 private:
  const CellBufferPlan& train_plan() const { return train_plan_; }

  LossSums run(const Schedule& schedule, const CellBufferPlan& plan, ConstMatrix<T> inputs,
               const Targets<T>& targets,
               std::int64_t n, std::uint64_t step, bool training);
  // The traffic part of run(): posts the receives and executes the ops.
  // Posts receives as `posts` says ([0]: before op 0, [i + 1]: after op i) and runs `ops`.
  LossSums run_posted(const std::vector<Op>& ops, const std::vector<std::vector<int>>& posts,
                      bool training);
  // Cancels and frees every posted operation (a step that threw).
  void abandon() noexcept;
  void forward(int m, bool keep, bool training, LossSums& sums);
  void post_receives(int m, bool training);
  // Backward (fused) when `split` is false; BackwardInput (B of a split backward) when true.
  void backward(int m, bool split);
  void backward_weights(int m);
  // Carries out a pending zero_gradients() at a training step's start:
  // zeroes the layers that do not write their gradients, marks the others in writes_.
  void begin_gradients();
  // ctx for layer l's parameter-gradient pass (backward, or W), then marks it done.
  PassContext gradient_context(PassContext ctx, int l);
  // Whole-batch W (fill_drain): the weight gradients of the layers in
  // batch_w_, each one backward_weights() over the n rows of the step.
  void batch_weights(int m);
  // Marks layer l's gradients final for the step and announces, in
  // descending layer order, every layer whose gradients and whose higher
  // layers' gradients are final (gradient_ready_).
  void gradient_final(int layer);
  // Emulated link: records the received message's wire event and holds until its arrival.
  void deliver(const BoundaryBuffer<T>& received, int m);
  ConstMatrix<T> layer_input(int m, int layer) const;
  Matrix<T> layer_output(int m, int layer) const;
  SavedView<T> layer_saved(int m, int layer) const;

  Communicator comm_;
  CellOptions options_;
  Schedule train_schedule_;
  CellBufferPlan train_plan_;
  int first_layer_ = 0;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  Vector<T> params_, grads_, state_;
  std::int64_t capacity_ = 0;  // rows per micro-batch buffer
  std::int64_t in_features_ = 0, out_features_ = 0;

  // Buffers indexed by buffer-plan slot (pipeline/buffer_plan.hpp).
  std::vector<BoundaryBuffer<T>> inputs_;       // [micro_batch slot] received inputs (not on the first cell)
  std::vector<BoundaryBuffer<T>> outputs_;      // [micro_batch slot] cell outputs to send (not on the last cell)
  std::vector<BoundaryBuffer<T>> output_grads_; // [micro_batch slot] received dL/doutput (not on the last cell)
  std::vector<Matrix<T>> logit_grads_;          // [micro_batch slot] last cell: dL/dlogits
  std::vector<Vector<T>> saved_last_;           // [micro_batch slot] the last layer's saved state
  std::vector<BoundaryBuffer<T>> input_grads_;  // [input_grad slot] dL/dinput to send (not on the first cell)
  std::vector<std::vector<Matrix<T>>> weight_grads_;  // [weight_grad slot][l] dL/dy of splitting layers 0..L_k-2 kept for W
  std::vector<bool> splits_;                    // [l] layer l splits its backward (Layer::splits_backward)
  std::vector<bool> batch_w_;                   // [l] whole-batch W for layer l (fill_drain, see batch_weights)
  std::vector<Matrix<T>> batch_dy_;             // [l] (max_batch, out_l): dL/dy of all micro-batches, for batch_w_ layers
  Vector<T> batch_x_shared_;                    // the batch_x_ storage without re-materialization
  std::vector<Matrix<T>> batch_x_;              // [l] (max_batch, in_l): the layer inputs, stacked (at B with re-materialization; else at W, in one shared buffer)
  std::vector<std::vector<Matrix<T>>> kept_;    // [activations slot][l] outputs of layers 0..L_k-2
  std::vector<std::vector<Vector<T>>> saved_;   // [activations slot][l] saved state of layers 0..L_k-2
  Matrix<T> logits_;                            // last cell: (capacity, classes)
  Vector<T> grad_ping_, grad_pong_;             // backward temporaries
  std::unique_ptr<Loss<T>> loss_;               // last cell
  std::int64_t activation_bytes_ = 0;
  Tracer* tracer_ = nullptr;
  double loss_scale_ = 1.0;  // set_loss_scale
  Wire to_next_, to_prev_;  // emulated link: this cell's two sending directions
  std::function<void(int)> gradient_ready_;
  int last_backward_ = -1;  // micro-batch of this cell's last Backward or BackwardInput op in train_schedule_
  int last_weights_ = -1;   // micro-batch of its last BackwardWeights op (-1: none)
  std::vector<bool> final_;  // [l] per step: layer l's gradients are final
  mutable bool zero_pending_ = false;  // zero_gradients() called, not yet carried out
  std::vector<bool> writes_;   // [l] per step: layer l's next gradient pass writes (beta = 0) instead of adding
  int announced_ = 0;        // per step: layers >= announced_ were passed to gradient_ready_

  // Per-step state.
  std::vector<MicroBatch> split_;
  const CellBufferPlan* plan_ = nullptr;   // the running schedule's plan
  std::vector<int> activation_slot_;       // [m] activations slot m's layers use now
  std::vector<std::vector<int>> posts_;    // [op + 1] micro-batches whose receives are posted after op
  ConstMatrix<T> batch_inputs_;
  Targets<T> batch_targets_;
  Matrix<T> predict_logits_;  // set during predict(): the last cell's output goes here
  std::int64_t batch_size_ = 0;
  BatchPlacement placement_;
  bool training_ = false;
  std::uint64_t step_ = 0;
};

}  // namespace gpipe

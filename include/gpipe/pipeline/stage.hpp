#pragma once
// A stage: one contiguous layer range of the model's partition into
// Schedule::stages stages, with its buffers from its buffer plan and its
// input source and output sink fixed at construction. A Runner
// (pipeline/runner.hpp) owns one rank's stages and runs their ops.

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
  int chunks = 1;              ///< v stages per rank (pipeline.chunks; interleaved_1f1b)
  int w_group = 1;             ///< micro-batches per W op (pipeline.w_group; group_weights)
  /// A training schedule to run instead of make_schedule(schedule, K, M,
  /// remat, chunks) when its cells > 0 (a hand-written or loaded schedule:
  /// any op lists naming global stages, with its stage map).
  Schedule custom_schedule;
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
  /// With a 16-bit wire (bf16 / fp16) and float cells: the per-micro-batch
  /// buffers a stage keeps between Forward(m) and Backward(m) hold 16-bit
  /// values in 16-bit slots (stores_16_bit; docs/design.md "Mixed
  /// precision", "16-bit activation storage"). False: float buffers of the
  /// same (16-bit-rounded) values, the layout before 16-bit storage (deck
  /// pipeline.activation_storage: float; results are bitwise the same).
  bool activation_storage16 = true;
};

/// Whether a stage of `options` whose master scalar has `scalar_bytes`
/// bytes stores its kept activations, boundary buffers and kept output
/// gradients as 16-bit values: a 16-bit wire, float (4-byte) cells and
/// options.activation_storage16.
bool stores_16_bit(const CellOptions& options, std::int64_t scalar_bytes);

/// The training schedule `options` ask for on `cells` ranks:
/// options.custom_schedule when set, else make_schedule(schedule, cells, M,
/// remat, chunks, w_group). Throws InputError as make_schedule does.
Schedule training_schedule(const CellOptions& options, int cells);

/// Where a cell's mini-batch sits in a larger global mini-batch (data
/// parallelism: each replica trains a shard of it).
struct BatchPlacement {
  std::int64_t offset = 0;       ///< global index of the first sample (keys Dropout)
  std::int64_t global_size = 0;  ///< N of the loss mean, 1/N (0: the cell's own n)
};

/// Where a stage's input comes from: the mini-batch (stage 0) or a receive
/// from stage - 1 (on its rank, possibly this one: a self-message).
enum class StageSource { Batch, Receive };
/// Where a stage's output goes: the loss (and prediction output; the last
/// stage) or a send to stage + 1.
enum class StageSink { Loss, Send };

/// A stage's place in the pipeline, fixed at construction.
struct StageLinks {
  int stage = 0;   ///< global stage index
  int stages = 1;  ///< stages of the pipeline (S)
  StageSource source = StageSource::Batch;
  int source_rank = -1;  ///< Receive: the rank of stage - 1
  StageSink sink = StageSink::Loss;
  int sink_rank = -1;    ///< Send: the rank of stage + 1
  /// Emulated link (null: none, or the peer is this rank): the wire towards
  /// sink_rank (activations) and towards source_rank (gradients).
  Wire* to_sink = nullptr;
  Wire* to_source = nullptr;
};

/// The per-step state a rank's stages share (the Runner's): the batch, its
/// split, and the bookkeeping of the rank's parameter gradients (indexed by
/// the rank's local layer index, all its stages' layers in stage order).
template <class T>
struct StepState {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::vector<MicroBatch> split;
  ConstMatrix<T> batch_inputs;
  Targets<T> batch_targets;
  Matrix<T> predict_logits;  ///< set during predict(): the last stage's output goes here
  std::int64_t batch_size = 0;
  BatchPlacement placement;
  bool training = false;
  Tracer* tracer = nullptr;
  /// The loss scale S (fp16 dynamic loss scaling, gpipe/optim/loss_scale.hpp):
  /// the loss gradient is S * dL/doutputs (1: bitwise unchanged).
  double loss_scale = 1.0;
  std::vector<bool> writes;  ///< [l] per step: layer l's next gradient pass writes (beta = 0) instead of adding
  std::vector<bool> final;   ///< [l] per step: layer l's gradients are final
  int announced = 0;         ///< per step: layers >= announced were passed to gradient_ready
  std::function<void(int)> gradient_ready;
  /// ctx for local layer l's parameter-gradient pass, then marks it done.
  PassContext gradient_context(PassContext ctx, int l);
  /// Marks local layer l's gradients final for the step and announces, in
  /// descending layer order, every layer whose gradients and whose higher
  /// layers' gradients are final.
  void gradient_final(int l);
};

/// Stage `links.stage` of a pipeline: layers [partition.first_layer(stage),
/// +layers.size()) of the model, `partition` over the schedule's stages
/// (the Runner owns the layers; their local indices on the rank
/// start at `local_offset`), its buffers the slots of the buffer plan of
/// stage links.stage in `training` (plan_buffers), allocated here for
/// micro-batches of up to ceil(max_batch / M) rows; a step allocates nothing.
/// Collective over nothing; `comm` is the pipeline's communicator. Public
/// members only (nvcc rule: no KOKKOS_LAMBDA in a private member).
template <class T>
class Stage {
 public:
  Stage(const ModelSpec& model, std::vector<Layer<T>*> layers, const Partition& partition, int local_offset,
        const StageLinks& links, const Schedule& training, MPI_Comm comm, const CellOptions& options,
        StepState<T>& state);
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  int index() const { return links_.stage; }
  int first_layer() const { return first_layer_; }
  int layer_count() const { return int(layers_.size()); }
  const StageLinks& links() const { return links_; }
  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }
  const CellBufferPlan& train_plan() const { return train_plan_; }
  /// Bytes of activation storage this stage allocates (planned_bytes of its plan).
  std::int64_t activation_bytes() const { return activation_bytes_; }
  /// Bytes of one boundary value on the wire (2 with a bf16 / fp16 wire,
  /// else sizeof(T)): the Tracer's Send and Receive bytes count these.
  std::int64_t wire_value_bytes() const;

  /// Starts a run of a schedule whose plan for this stage is `plan` (it
  /// must outlive the run).
  void begin(const CellBufferPlan& plan);
  /// Rows copied into the grouped W's stacking buffers since construction
  /// (those of a group whose slots are not consecutive, the stage input's
  /// and the last layer's output gradient; the rest are read in place).
  std::int64_t stacked_rows_copied() const { return stacked_rows_copied_; }
  /// Posts the receives of micro-batch m (the input from stage - 1; in
  /// training, the gradient from stage + 1).
  void post_receives(int m);
  void forward(int m, bool whole_stage, LossSums& sums);
  /// Backward (fused) when `split` is false; BackwardInput (B of a split backward) when true.
  void backward(int m, bool split);
  /// W of micro-batches m .. m + count - 1 (count > 1: a grouped W; the
  /// whole_batch_weights layers run one pass over the group's stacked rows).
  void backward_weights(int m, int count = 1);
  /// The whole-batch W (BatchWeights op).
  void batch_weights(int m);
  /// Waits for this stage's sends (end of a run).
  void wait_sends();
  /// The loss sums of the micro-batches this (sink Loss) stage evaluated since
  /// the last call, read from the device once (Loss::take_sums: the run's one
  /// fence for them); zero sums for a stage without the loss.
  LossSums take_loss_sums();
  /// Cancels and frees every posted operation (a step that threw).
  void abandon() noexcept;

  ConstMatrix<T> layer_input(int m, int layer) const;
  // The x a backward of `layer` for micro-batch m gets: layer_input, or,
  // where the layer does not read it (Layer::reads_input_in_backward), its
  // extents with a null pointer (no unpacking from 16-bit storage).
  ConstMatrix<T> backward_input_values(int m, int layer) const;
  /// Where layer `layer`'s forward output of micro-batch m is (the logits,
  /// the send buffer or the kept activation); with 16-bit storage, for a
  /// layer before the stage's last or a Send sink, the float working buffer
  /// Forward(m) writes it into before packing it (valid during Forward(m)).
  Matrix<T> layer_output(int m, int layer) const;
  SavedView<T> layer_saved(int m, int layer) const;
  /// dL/dy of local layer l of micro-batch m kept by its BackwardInput for
  /// its BackwardWeights op (l + 1 < layer_count(), a splitting layer); with
  /// 16-bit storage unpacked into the backward's first temporary.
  ConstMatrix<T> kept_output_grad(int m, int l) const;
  /// The received dL/doutput of micro-batch m (sink Send, after its wait);
  /// with 16-bit storage unpacked into `work` (rows x out_features() values).
  ConstMatrix<T> received_output_grad(int m, T* work) const;
  // Emulated link: records the received message's wire event and holds until its arrival.
  void deliver(const BoundaryBuffer<T>& received, int m);

 private:
  StageLinks links_;
  MPI_Comm comm_;
  int own_rank_ = 0;
  const CellOptions& options_;
  StepState<T>& state_;
  int first_layer_ = 0, local_offset_ = 0;
  std::vector<Layer<T>*> layers_;
  CellBufferPlan train_plan_;
  const CellBufferPlan* plan_ = nullptr;  // the running schedule's plan
  std::int64_t capacity_ = 0;             // rows per micro-batch buffer
  std::int64_t in_features_ = 0, out_features_ = 0;
  int last_backward_ = -1;  // micro-batch of this stage's last Backward or BackwardInput op in training
  int last_weights_ = -1;   // micro-batch of its last BackwardWeights op (-1: none)
  std::int64_t activation_bytes_ = 0;
  std::int64_t stacked_rows_copied_ = 0;

  // Buffers indexed by buffer-plan slot (pipeline/buffer_plan.hpp).
  std::vector<BoundaryBuffer<T>> inputs_;       // [micro_batch slot] received inputs (source Receive)
  std::vector<BoundaryBuffer<T>> outputs_;      // [micro_batch slot] stage outputs to send (sink Send)
  std::vector<BoundaryBuffer<T>> output_grads_; // [micro_batch slot] received dL/doutput (sink Send)
  std::vector<Matrix<T>> logit_grads_;          // [micro_batch slot] sink Loss: dL/dlogits
  std::vector<Vector<T>> saved_last_;           // [micro_batch slot] the last layer's saved state
  std::vector<BoundaryBuffer<T>> input_grads_;  // [input_grad slot] dL/dinput to send (source Receive)
  std::vector<std::vector<Matrix<T>>> weight_grads_;  // [weight_grad slot][l] dL/dy of splitting layers 0..L-2 kept for W
  std::vector<bool> splits_;                    // [l] layer l splits its backward (Layer::splits_backward)
  std::vector<bool> batch_w_;                   // [l] whole-batch W for layer l (the stage runs a BatchWeights op)
  std::vector<Matrix<T>> batch_dy_;             // [l] (max_batch, out_l): dL/dy of all micro-batches, for batch_w_ layers
  Vector<T> batch_x_shared_;                    // the batch_x_ storage without re-materialization
  std::vector<Matrix<T>> batch_x_;              // [l] (max_batch, in_l): the layer inputs, stacked
  std::vector<bool> group_w_;                   // [l] a grouped W stacks layer l's rows (whole_batch_weights)
  Vector<T> group_x_, group_dy_;                // grouped W: (weight_group x rows) x the widest input / output
  std::vector<std::vector<Matrix<T>>> kept_;    // [activations slot][l] outputs of layers 0..L-2
  // One allocation per layer l for all slots of kept_ (slot s: rows s x capacity
  // ..) and of weight_grads_: a grouped W whose micro-batches sit in consecutive
  // slots reads their rows in place (slot_rows_stacked) instead of stacking copies.
  std::vector<Vector<T>> kept_block_, weight_grad_block_;  // [l]
  std::vector<std::vector<Vector<T>>> saved_;   // [activations slot][l] saved state of layers 0..L-2
  Matrix<T> logits_;                            // sink Loss: (capacity, classes)
  Vector<T> grad_ping_, grad_pong_;             // backward temporaries
  std::unique_ptr<Loss<T>> loss_;               // sink Loss
  std::vector<int> activation_slot_;            // [m] activations slot m's layers use now
  // 16-bit activation storage (stores_16_bit): kept_ and weight_grads_ are
  // empty and these 16-bit slots hold the same values; the boundary buffers
  // keep only their 16-bit buffers (BoundaryBuffer::set_storage_format). A
  // layer input is unpacked into input_work_ when a backward reads it; the
  // forward writes each output into grad_ping_/grad_pong_ and packs it.
  bool storage16_ = false;
  std::vector<std::vector<Kokkos::View<std::uint16_t*, MemSpace>>> kept16_;          // [activations slot][l]
  std::vector<std::vector<Kokkos::View<std::uint16_t*, MemSpace>>> weight_grads16_;  // [weight_grad slot][l]
  Vector<T> input_work_;  // (capacity x the widest layer input): a 16-bit input unpacked
  Matrix<T> forward_output(int m, int layer) const;  // 16-bit storage: where Forward(m) writes layer's output
  // 16-bit storage: rounds y and packs it into its slot (`exact`: y already
  // representable, Layer::preserves_values, so it is only packed).
  void store_output(int m, int layer, const Matrix<T>& y, bool exact);
};

/// Bytes of activation storage stage `stage` of `partition` (over
/// schedule.stages stages) allocates for its buffer plan in `schedule`
/// (micro-batches of ceil(max_batch / M) rows of `scalar_bytes`-byte
/// values; `shapes` from model_shapes): exactly what Stage::activation_bytes()
/// reports, from the shape pass alone (no Kokkos, no MPI). With 16-bit
/// storage (stores_16_bit) the kept layer outputs, the stage's input and
/// output and the kept output gradients count 2 bytes a value (exactly
/// half of float's); the saved state, the last stage's logits and the
/// whole-batch W's stacks stay `scalar_bytes`. Working buffers of one
/// micro-batch per stage (the backward's ping-pong pair; with 16-bit
/// storage the float buffer a 16-bit layer input is unpacked into,
/// capacity x the widest layer input) are not counted here (cell_memory
/// counts them, train/memory.hpp).
std::int64_t stage_activation_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                    int stage, const Schedule& schedule, const CellOptions& options,
                                    std::int64_t scalar_bytes);

/// The bytes of a grouped W's stacking buffers per micro-batch of a group
/// (SlotBytes::weight_group; stage_activation_bytes counts them
/// plan.weight_group times when plan.weight_group > 1): rows (the largest
/// micro-batch) x (the widest input of the stage's whole_batch_weights
/// layers, stage 0's first layer excluded: it reads the mini-batch itself,
/// + the widest of their outputs) x scalar_bytes.
std::int64_t weight_group_bytes(const std::vector<LayerShape>& shapes, const Partition& partition, int stage,
                                std::int64_t rows, std::int64_t scalar_bytes);
/// The slot sizes stage_activation_bytes multiplies by the plan's slot
/// counts (planned_bytes of total()), split by element size.
struct StageSlotBytes {
  /// The kept values: the stage's input and output (micro_batch), the kept
  /// layer outputs (activations) and the kept output gradients
  /// (weight_grad); 2 bytes a value with 16-bit storage, else scalar_bytes.
  SlotBytes values;
  /// scalar_bytes a value in every precision: the saved state (micro_batch:
  /// the last layer's; activations: layers 0..L-2), the logits (fixed) and
  /// the whole-batch W's stacks (batch_weights) and a grouped W's stacks
  /// (weight_group).
  SlotBytes scalar;
  SlotBytes total() const;  ///< values + scalar, field by field
};
/// The slot sizes of stage `stage` (as stage_activation_bytes).
StageSlotBytes stage_slot_bytes(const std::vector<LayerShape>& shapes, const Partition& partition, int stage,
                                const Schedule& schedule, const CellOptions& options, std::int64_t scalar_bytes);

/// The bytes the whole-batch W adds to stage_activation_bytes when the
/// stage runs a BatchWeights op: max_batch x (the output widths of the
/// stage's whole_batch_weights layers, summed, for their output gradients +
/// the widest of their inputs, for the stacked input; every input with
/// re-materialization; stage 0's first layer reads the mini-batch itself)
/// x scalar_bytes.
std::int64_t batch_weight_bytes(const std::vector<LayerShape>& shapes, const Partition& partition,
                                int stage, const CellOptions& options, std::int64_t scalar_bytes);

}  // namespace gpipe

#pragma once
// The layer interface. A layer maps x (batch, in_features) to
// y (batch, out_features), both row-major Views in MemSpace; it reads the
// features of one sample as its input shape (layers/shape.hpp).
//
// Layers keep no activations: the cell runner owns all activation storage,
// and also the state a layer saves in forward() for backward() (pooling
// argmax, normalization statistics), which is what makes re-materialization
// a scheduling decision rather than a per-layer feature (GPipe, Huang et al.
// 2019, sec. 2.2). Shapes, parameter specs, saved sizes and FLOPs come from
// the shape pass (model/shapes.hpp), so layers and the pass never disagree.

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/core/views.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe {

/// What a forward/backward pass needs to know besides its tensors.
struct PassContext {
  std::uint64_t seed = 0;         ///< run seed (deck `seed`)
  std::uint64_t step = 0;         ///< optimizer step (mini-batch) index, from 0
  std::int64_t sample_offset = 0; ///< index of the micro-batch's first sample in its mini-batch
  bool training = true;           ///< false: evaluation (Dropout is the identity)
  /// true: this forward repeats one already run in this step
  /// (re-materialization); layers must not update running state again.
  bool recompute = false;
  /// The execution-space instance every kernel and deep_copy of the pass is
  /// submitted to; the cell fences this instance (never Kokkos::fence())
  /// before handing a buffer to MPI or the host.
  ExecSpace space{};
  /// Parameter gradients: true: backward() and backward_weights() *add*
  /// dL/dparameters to the bound gradients; false: they *write* them (the
  /// first backward of a step after Cell::zero_gradients(), so the weight
  /// gradient GEMM runs with beta = 0 instead of after a zeroing pass). Only
  /// layers whose writes_gradients() is true see false; the old contents
  /// are then never read (they may be NaN).
  bool accumulate_gradients = true;
};

/// A layer's saved state for one micro-batch: saved_size().elements(n)
/// elements in MemSpace, laid out as the layer documents.
template <class T>
using SavedView = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
class Layer {
 public:
  virtual ~Layer() = default;

  /// Type name as written in the input deck ("dense", "conv2d", ...).
  const std::string& type() const { return shape_.type(); }
  std::int64_t in_features() const { return shape_.input.size(); }
  std::int64_t out_features() const { return shape_.output.size(); }
  /// Per-sample input and output shapes.
  const Shape& input_shape() const { return shape_.input; }
  const Shape& output_shape() const { return shape_.output; }
  /// Position of the layer in the whole model (0-based); keys its RNG streams.
  std::int64_t index() const { return shape_.index; }
  const LayerShape& shape() const { return shape_; }

  /// Parameter tensors in storage order; empty for parameter-free layers.
  const std::vector<ParameterSpec>& parameter_specs() const { return shape_.parameters; }
  std::int64_t parameter_count() const { return shape_.parameter_count(); }
  /// Saved state forward() writes and backward() reads.
  const SavedSize& saved_size() const { return shape_.saved; }

  /// Points the layer's parameters and gradients at `values` and `gradients`,
  /// each holding parameter_count() elements in MemSpace (slices of the
  /// cell's flat buffers), laid out in parameter_specs() order.
  virtual void bind(T* values, T* gradients) {
    (void)values;
    (void)gradients;
  }
  /// Points the layer's non-trainable state (shape().state, e.g. running
  /// statistics) at `values`: state_count() elements in MemSpace, a slice of
  /// the cell's state buffer. The layer updates it in training forward passes
  /// that are not recomputes; the optimizer never touches it.
  virtual void bind_state(T* values) { (void)values; }
  std::int64_t state_count() const { return shape_.state_count(); }
  /// Writes deterministic initial values keyed by (seed, index(), element),
  /// to the parameters and the state.
  virtual void initialize(std::uint64_t seed) { (void)seed; }
  /// Allocates the layer's temporary workspace (e.g. im2col columns) for
  /// micro-batches of up to `rows` samples. The cell calls it once, so steps
  /// allocate nothing; a layer used outside a cell grows its workspace on
  /// first use. The workspace holds nothing between forward() and backward().
  virtual void reserve(std::int64_t rows) { (void)rows; }

  /// y = f(x). x: (n, in_features), y: (n, out_features), preallocated.
  /// saved: saved_size().elements(n) elements (extent 0 when none), written
  /// here in training (ctx.training) for backward().
  virtual void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y,
                       SavedView<T> saved) = 0;

  /// Given the forward input x, the state forward() saved, and dL/dy, writes
  /// dL/dx into dx and *adds* dL/dparameters to the bound gradients. dx may
  /// have extent 0 (the first layer of the model), in which case it is not
  /// computed.
  virtual void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                        SavedView<T> saved) = 0;

  /// The backward split into its two halves, for zero-bubble schedules
  /// (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): the B op,
  /// backward_input(), computes dL/dx (on the critical path of the pipeline);
  /// the W op, backward_weights(), adds dL/dparameters and may run later.
  /// A layer that splits (splits_backward() true) computes only dx in
  /// backward_input() and only the parameter gradients in
  /// backward_weights(), which reads the same x, saved state and dy, so the
  /// caller keeps them until the W op. The default, for every other layer:
  /// backward_input() is the whole backward() and backward_weights() does
  /// nothing. backward() of a splitting layer must equal
  /// backward_weights() followed by backward_input() bitwise.
  virtual bool splits_backward() const { return false; }
  /// True if every value of y is a value of x or zero and every value of
  /// dx a value of dy, a sum of zero and one value of dy, or zero (ReLU,
  /// max pooling with disjoint windows, flatten): x and dy exactly
  /// representable in a 16-bit format then make y and dx so. The cell then
  /// skips the policy's rounding of this layer's output and input gradient
  /// (the same bits: rounding a representable value returns it).
  virtual bool preserves_values() const { return false; }
  /// False if backward(), backward_input() and backward_weights() never
  /// read x's values (max and average pooling, global_avgpool, flatten,
  /// dropout, pos_embed, token_mean: they read dy and saved state only).
  /// The stage then passes an x with x's extents and a null data pointer,
  /// and under 16-bit activation storage neither packs that input after the
  /// forward (it is still rounded) nor unpacks it for the backward. A layer
  /// that returns false and reads x dereferences null: the layer tests run
  /// each such backward on a null x
  /// (LayerInputs.BackwardWithoutInputValuesWhereDeclared). A layer that
  /// splits its backward (splits_backward()) must read x: the stage throws
  /// std::logic_error at construction otherwise.
  virtual bool reads_input_in_backward() const { return true; }
  /// True if the layer honours PassContext::accumulate_gradients == false
  /// (writes its parameter gradients instead of adding them). The cell
  /// zeroes the gradients of every other layer before a step's first
  /// backward.
  virtual bool writes_gradients() const { return false; }
  /// True if one backward_weights() over a whole mini-batch of N rows (x
  /// and dy of every micro-batch stacked in micro-batch order) is cheaper
  /// than M of N/M rows each (Dense: one weight-gradient GEMM with k = N).
  /// Only splitting layers; must equal the registry entry's
  /// whole_batch_weights. The cell uses it under fill_drain (Cell, "whole-batch W").
  virtual bool whole_batch_weights() const { return false; }
  /// B op: dL/dx into dx (not computed when dx has extent 0); for layers that
  /// do not split, also the parameter gradients (the whole backward()).
  virtual void backward_input(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                              Matrix<T> dx, SavedView<T> saved) {
    backward(ctx, x, dy, dx, saved);
  }
  /// W op: *adds* dL/dparameters to the bound gradients, from the same x,
  /// dy and saved state the B op of this micro-batch had. No-op unless
  /// splits_backward().
  virtual void backward_weights(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                                SavedView<T> saved) {
    (void)ctx;
    (void)x;
    (void)dy;
    (void)saved;
  }

  /// forward()/backward() with saved state allocated for this call only (for
  /// tests and profiling; the cell passes storage it owns). backward() then
  /// runs forward() first to fill it.
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y);
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx);

  /// Floating-point operations of forward + backward for `batch` samples;
  /// without the input gradient when `input_gradient` is false (the model's
  /// first layer, see backward()).
  double flops(std::int64_t batch, bool input_gradient = true) const {
    return shape_.flops(batch, input_gradient);
  }

 protected:
  explicit Layer(const LayerShape& shape) : shape_(shape) {}

 private:
  LayerShape shape_;
};

}  // namespace gpipe

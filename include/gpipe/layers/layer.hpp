#pragma once
// The layer interface. A layer maps x (batch, in_features) to
// y (batch, out_features), both row-major Views in MemSpace.
//
// Layers keep no activations: backward() receives the same input x that
// forward() saw and recomputes what it needs. The cell runner owns all
// activation storage, which is what makes re-materialization a scheduling
// decision rather than a per-layer feature (GPipe, Huang et al. 2019, sec. 2.2).

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/core/views.hpp"

namespace gpipe {

/// What a forward/backward pass needs to know besides its tensors.
struct PassContext {
  std::uint64_t seed = 0;         ///< run seed (deck `seed`)
  std::uint64_t step = 0;         ///< optimizer step (mini-batch) index, from 0
  std::int64_t sample_offset = 0; ///< index of the micro-batch's first sample in its mini-batch
  bool training = true;           ///< false: evaluation (Dropout is the identity)
};

/// One parameter tensor of a layer: `rows` x `cols` (a vector has rows == 1).
struct ParameterSpec {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t size() const { return rows * cols; }
};

template <class T>
class Layer {
 public:
  virtual ~Layer() = default;

  /// Type name as written in the input deck ("dense", "relu", ...).
  virtual std::string type() const = 0;
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }
  /// Position of the layer in the whole model (0-based); keys its RNG streams.
  std::int64_t index() const { return index_; }

  /// Parameter tensors in storage order; empty for parameter-free layers.
  virtual std::vector<ParameterSpec> parameter_specs() const { return {}; }
  std::int64_t parameter_count() const;

  /// Points the layer's parameters and gradients at `values` and `gradients`,
  /// each holding parameter_count() elements in MemSpace (slices of the
  /// cell's flat buffers), laid out in parameter_specs() order.
  virtual void bind(T* values, T* gradients) {
    (void)values;
    (void)gradients;
  }
  /// Writes deterministic initial values keyed by (seed, index(), element).
  virtual void initialize(std::uint64_t seed) { (void)seed; }

  /// y = f(x). x: (n, in_features), y: (n, out_features), preallocated.
  virtual void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y) = 0;

  /// Given the forward input x and dL/dy, writes dL/dx into dx and *adds*
  /// dL/dparameters to the bound gradients. dx may have extent 0 (the first
  /// layer of the model), in which case it is not computed.
  virtual void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                        Matrix<T> dx) = 0;

  /// Floating-point operations of forward + backward for `batch` samples;
  /// without the input gradient when `input_gradient` is false (the model's
  /// first layer, see backward()).
  double flops(std::int64_t batch, bool input_gradient = true) const {
    return count_flops(batch, input_gradient);
  }

 protected:
  virtual double count_flops(std::int64_t batch, bool input_gradient) const = 0;
  Layer(std::int64_t index, std::int64_t in, std::int64_t out) : index_(index), in_(in), out_(out) {}

 private:
  std::int64_t index_;
  std::int64_t in_;
  std::int64_t out_;
};

template <class T>
std::int64_t Layer<T>::parameter_count() const {
  std::int64_t total = 0;
  for (const auto& p : parameter_specs()) total += p.size();
  return total;
}

}  // namespace gpipe

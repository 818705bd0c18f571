#pragma once
// The model description and the pure shape pass over it: per-sample shapes,
// parameter tensors, saved state and FLOPs of every layer, computed from the
// spec alone (no layer is built, no Kokkos needed). Checkpoint layouts, cost
// tables, the partition table and the cell's buffer sizes all come from here.

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/layers/registry.hpp"

namespace gpipe {

/// The loss the last cell applies (deck `model.loss`, `model.huber_delta`).
struct LossSpec {
  /// softmax_cross_entropy (integer labels) | token_cross_entropy (an integer
  /// label per token: the last layer outputs [T, V], V logits for each of T
  /// tokens) | mse | mae | huber (float targets)
  std::string type = "softmax_cross_entropy";
  double huber_delta = 1.0;  ///< huber: quadratic for |e| <= delta, linear beyond
  /// True for the losses that read float targets.
  bool regression() const { return type != "softmax_cross_entropy" && type != "token_cross_entropy"; }
  /// True for the per-token loss of a language model (loss/token_cross_entropy.hpp).
  bool tokens() const { return type == "token_cross_entropy"; }
};

/// The model: per-sample input shape, then layers in order (a Sequential model).
struct ModelSpec {
  /// Deck `model.input`: [784] for flat features, [1, 28, 28] for images
  /// (channels, height, width). May be left empty when input_features is set.
  Shape input;
  /// Features per sample (the product of `input`'s dimensions). Samples are
  /// rows of this many values, whatever their shape.
  std::int64_t input_features = 0;
  std::vector<LayerSpec> layers;
  LossSpec loss;

  /// `input`, or [input_features] when `input` is empty.
  Shape input_shape() const;
  /// Output features of each layer (size L); throws as model_shapes().
  std::vector<std::int64_t> output_features() const;
  /// Outputs of the last layer: class logits, or regression outputs (T x V
  /// logits for token_cross_entropy).
  std::int64_t classes() const { return output_features().back(); }
  /// Integer labels per sample the loss reads: T, the tokens of the last
  /// layer's [T, V] output, for token_cross_entropy; else 1 (0: regression).
  std::int64_t labels_per_sample() const;
  /// token_cross_entropy: V, the logits per token; else classes().
  std::int64_t vocabulary() const;
};

/// Layer `index` of a model as the shape pass sees it.
struct LayerShape {
  std::int64_t index = 0;
  LayerSpec spec;
  const LayerEntry* entry = nullptr;
  Shape input, output;                    ///< per sample
  std::vector<ParameterSpec> parameters;  ///< storage order
  SavedSize saved;                        ///< state forward() keeps for backward()
  std::vector<ParameterSpec> state;       ///< non-trainable tensors (running statistics)

  const std::string& type() const { return spec.type; }
  std::int64_t parameter_count() const;
  std::int64_t state_count() const;
  /// Forward + backward FLOPs for `batch` samples (see LayerEntry::flops).
  double flops(std::int64_t batch, bool input_gradient = true) const;
};

/// Layer `spec` alone at position `index` of a model, taking per-sample
/// `input`. Throws InputError "<where>: layer <index> (<type>) cannot take
/// input shape [..]: expected ..." when the input does not fit, and for an
/// unknown type.
LayerShape layer_shape(const LayerSpec& spec, const Shape& input, std::int64_t index = 0);

/// The shape pass: every layer's shapes in order. Throws InputError for an
/// empty model, a non-positive input, an unknown type, a layer that cannot
/// take its input shape ("<where>: layer <i> (<type>) cannot take input shape
/// [..]: expected ..."), and a last layer that does not output a flat vector
/// of >= 2 logits (classification) or >= 1 value (regression losses).
std::vector<LayerShape> model_shapes(const ModelSpec& model);

}  // namespace gpipe

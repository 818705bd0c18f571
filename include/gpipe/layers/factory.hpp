#pragma once
// Building layers from their description in an input deck.

#include <memory>
#include <string>
#include <vector>

#include "gpipe/layers/dense.hpp"
#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// One entry of the deck's `model.layers` list.
struct LayerSpec {
  std::string type;          ///< dense | relu | gelu | tanh | layer_norm | dropout
  std::int64_t units = 0;    ///< dense: output features (> 0)
  Init init = Init::He;      ///< dense: initialization
  double rate = 0;           ///< dropout: drop probability in [0, 1)
  double eps = 1e-5;         ///< layer_norm: variance epsilon (> 0)
  std::string where;         ///< origin for error messages, e.g. "deck.yaml:12:5 (model.layers[3])"
};

/// The model: input features, then layers in order (a Sequential model).
struct ModelSpec {
  std::int64_t input_features = 0;
  std::vector<LayerSpec> layers;

  /// Output features of each layer (size L); throws InputError naming the
  /// layer's `where` if a spec is invalid.
  std::vector<std::int64_t> output_features() const;
  std::int64_t classes() const { return output_features().back(); }
};

/// The layer types make_layer() knows, for help texts and error messages.
const std::vector<std::string>& layer_types();

/// Builds layer `index` of `model` (parameters unbound). Throws InputError
/// for an unknown type or invalid sizes, naming spec.where.
template <class T>
std::unique_ptr<Layer<T>> make_layer(const ModelSpec& model, std::int64_t index);

}  // namespace gpipe

#pragma once
// Building layers from the model description, through the layer registry.

#include <memory>

#include "gpipe/layers/layer.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe {

/// Builds the layer the shape pass described (parameters unbound).
template <class T>
std::unique_ptr<Layer<T>> make_layer(const LayerShape& shape);

/// Builds layer `index` of `model` (runs the shape pass; prefer the overload
/// above when building many layers). Throws InputError as model_shapes().
template <class T>
std::unique_ptr<Layer<T>> make_layer(const ModelSpec& model, std::int64_t index);

}  // namespace gpipe

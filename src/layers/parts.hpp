#pragma once
// Internal: shapes of the existing layers used as parts of a composite layer
// (patch_embed's projection, transformer_block's LayerNorms, projections,
// GELU and Dropouts). A part is an ordinary layer built through the
// registry; the composite binds it to a slice of its own parameters and
// gives it a key of its own for initialization and Dropout masks.

#include <cstdint>
#include <memory>

#include "gpipe/layers/dense.hpp"
#include "gpipe/layers/dropout.hpp"
#include "gpipe/layers/layer_norm.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe::detail {

/// RNG key of part `part` (< 16) of the model's layer `index`: disjoint from
/// every model layer index, so parts never share initial values or Dropout
/// masks with a model layer or with each other.
inline std::int64_t part_key(std::int64_t index, int part) {
  return (std::int64_t(1) << 40) + index * 16 + part;
}

/// The shape of a part of type `type` with config `config` on per-sample input `input`.
inline LayerShape part_shape(const char* type, std::shared_ptr<const LayerConfig> config,
                             const Shape& input, std::int64_t key) {
  return layer_shape(LayerSpec{type, std::move(config), type}, input, key);
}

/// A Dense part (in -> units), Glorot-uniform initialized.
inline LayerShape dense_part(std::int64_t in, std::int64_t units, std::int64_t key) {
  auto c = std::make_shared<DenseConfig>();
  c->units = units;
  c->init = Init::Glorot;
  return part_shape("dense", c, Shape{in}, key);
}

inline LayerShape layer_norm_part(std::int64_t features, std::int64_t key) {
  return part_shape("layer_norm", std::make_shared<LayerNormConfig>(), Shape{features}, key);
}

/// A Dropout part over `features` per sample (the composite's whole activation).
inline LayerShape dropout_part(std::int64_t features, double rate, std::int64_t key) {
  auto c = std::make_shared<DropoutConfig>();
  c->rate = rate;
  return part_shape("dropout", c, Shape{features}, key);
}

/// Row-major (rows, cols) matrices over memory owned elsewhere, in the
/// types the Layer interface takes.
template <class T>
Matrix<T> as_matrix(T* data, std::int64_t rows, std::int64_t cols) {
  return Matrix<T>(data, size_t(rows), size_t(cols));
}
template <class T>
ConstMatrix<T> as_const_matrix(const T* data, std::int64_t rows, std::int64_t cols) {
  return ConstMatrix<T>(data, size_t(rows), size_t(cols));
}

}  // namespace gpipe::detail

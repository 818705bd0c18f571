#pragma once
// The layer registry: one entry per layer type, holding everything the rest
// of gpipe needs to know about the type: its deck name and keys, a parser
// from the deck into a typed config, pure shape inference, parameter specs,
// saved-state size, FLOP count and a factory. Nothing here needs a running
// Kokkos; only the factory builds Views.
//
// Adding a layer type: write src/layers/<file>.cpp with the class and, at
// namespace scope, `GPIPE_LAYER_ENTRIES(<file>) { return {entry, ...}; }`
// (CMake finds the file and that line), plus its test. See
// src/layers/dense.cpp for a complete example.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpipe/layers/shape.hpp"

namespace gpipe {

template <class T>
class Layer;       // layers/layer.hpp
struct LayerShape; // model/shapes.hpp

/// Base of the typed configs an entry's parser returns (DenseConfig, ...).
/// Types without keys use LayerConfig itself.
struct LayerConfig {
  virtual ~LayerConfig() = default;
};

/// State a layer saves in forward() for backward(), beyond its input:
/// n * per_sample + per_micro_batch elements of T for a micro-batch of n
/// samples. The cell owns it (see Cell, docs/design.md "Saved state").
struct SavedSize {
  std::int64_t per_sample = 0;
  std::int64_t per_micro_batch = 0;
  std::int64_t elements(std::int64_t n) const { return n * per_sample + per_micro_batch; }
};

/// Thrown by an entry's output_shape when an input shape does not fit; the
/// text says what was expected. model_shapes() turns it into an InputError
/// naming the layer's position, index, type and input shape.
class ShapeMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Typed read access to one layer's map in the deck. Every error is an
/// InputError "file:line:column: model.layers[i].key: problem".
class LayerKeys {
 public:
  struct Impl;
  explicit LayerKeys(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  bool has(const std::string& key) const;
  /// An integer >= min; `fallback` when absent. `expected` words the domain
  /// ("a positive integer").
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                       const char* expected) const;
  /// As integer(), but the key must be present.
  std::int64_t required_integer(const std::string& key, std::int64_t min,
                                const char* expected) const;
  /// A number in [lo, hi) (hi excluded when hi_open, included otherwise).
  double number(const std::string& key, double fallback, double lo, double hi, bool hi_open,
                const char* expected) const;
  /// A scalar's text (a word or a number), `fallback` when absent.
  std::string text(const std::string& key, const std::string& fallback, const char* expected) const;
  bool flag(const std::string& key, bool fallback) const;
  /// Throws the InputError for `key` with `problem` ("expected ..., got ...").
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;

 private:
  std::shared_ptr<const Impl> impl_;
};

/// The operands a layer's backward converts to bf16 once and holds in the
/// kernel seam's reuse slots while its kernels::OperandReuse scope lives
/// (gpipe/kernels/gemm.hpp; oneDNN's bf16 GEMM only): the values of the
/// largest GEMM operand x (the first of a weight-gradient product) and of
/// the largest dy (the second) it converts inside the scope.
struct ReusedOperands {
  std::int64_t x = 0, dy = 0;
};

/// One layer type. Functions are plain pointers so an entry is constant data.
struct LayerEntry {
  std::string name;               ///< deck `type`
  std::vector<std::string> keys;  ///< accepted keys besides `type`
  /// Reads the layer's keys into its typed config (validating their domains).
  std::shared_ptr<const LayerConfig> (*parse)(const LayerKeys& keys) = nullptr;
  /// Per-sample output shape for a per-sample input shape; throws ShapeMismatch.
  Shape (*output_shape)(const LayerConfig& config, const Shape& input) = nullptr;
  /// Parameter tensors in storage order (null: none).
  std::vector<ParameterSpec> (*parameters)(const LayerConfig& config, const Shape& input) = nullptr;
  /// Saved state for backward (null: none).
  SavedSize (*saved)(const LayerConfig& config, const Shape& input) = nullptr;
  /// Non-trainable tensors the layer updates itself (running statistics):
  /// never touched by the optimizer, stored in checkpoints (null: none).
  std::vector<ParameterSpec> (*state)(const LayerConfig& config, const Shape& input) = nullptr;
  /// Floating-point operations of forward + backward for `batch` samples;
  /// without the input gradient when input_gradient is false (the model's
  /// first layer computes none).
  double (*flops)(const LayerConfig& config, const Shape& input, const Shape& output,
                  std::int64_t batch, bool input_gradient) = nullptr;
  /// The workspace Views the layer (and its kernels) allocates for
  /// micro-batches of `rows` samples of `scalar_bytes`-byte values in a step
  /// of `micro_batches` micro-batches, bytes of each: what
  /// Layer::reserve(rows) and its first step allocate, held for the layer's
  /// lifetime (null: none). The memory model (train/memory.hpp) adds them
  /// to the cell's bytes.
  std::vector<std::int64_t> (*workspace)(const LayerConfig& config, const Shape& input, std::int64_t rows,
                                         int scalar_bytes, int micro_batches) = nullptr;
  /// The layer's kernels::OperandReuse operands for micro-batches of `rows`
  /// samples (null: its backward opens no such scope). A splitting layer
  /// (Dense) opens the scope in its fused backward() only, not in
  /// backward_input / backward_weights; a layer that does not split (a
  /// transformer block's or patch embedding's inner Dense products) in every
  /// backward. The memory model (train/memory.hpp, seam_scratch) counts the
  /// grow-only slots they take.
  ReusedOperands (*reused_operands)(const LayerConfig& config, const Shape& input, std::int64_t rows) = nullptr;
  /// The layer computes its backward as separate B (input gradient) and W
  /// (weight gradient) ops; must equal its Layer::splits_backward(). The
  /// buffer plan keeps its output gradient from B to W (zero_bubble).
  bool splits_backward = false;
  /// Layer::whole_batch_weights(): fill_drain computes its weight gradient
  /// once over the mini-batch; the cell keeps its output gradients for it.
  bool whole_batch_weights = false;
  std::unique_ptr<Layer<float>> (*make_float)(const LayerShape& shape) = nullptr;
  std::unique_ptr<Layer<double>> (*make_double)(const LayerShape& shape) = nullptr;
};

/// Factory helper for entries: `e.make_float = construct<Dense, float>;`.
template <template <class> class L, class T>
std::unique_ptr<Layer<T>> construct(const LayerShape& shape) {
  return std::make_unique<L<T>>(shape);
}
/// Sets both factories of `e` to construct L<float> and L<double>.
template <template <class> class L>
LayerEntry& with_factories(LayerEntry& e) {
  e.make_float = &construct<L, float>;
  e.make_double = &construct<L, double>;
  return e;
}

/// The entry of deck type `type`, or null.
const LayerEntry* find_layer_entry(const std::string& type);
/// Every registered deck type, sorted, for help texts and error messages.
const std::vector<std::string>& layer_types();

/// One entry of the deck's `model.layers` list: its type, the typed config
/// its entry parsed, and where it came from.
struct LayerSpec {
  std::string type;
  std::shared_ptr<const LayerConfig> config;
  std::string where;  ///< origin for messages, e.g. "deck.yaml:12:5 (model.layers[3])"

  /// The typed config; throws std::logic_error for the wrong type.
  template <class C>
  const C& as() const {
    const C* c = dynamic_cast<const C*>(config.get());
    if (!c) throw std::logic_error("gpipe: layer '" + type + "' has no such config type");
    return *c;
  }
};

/// Parses one layer from YAML text, e.g. "{type: conv2d, filters: 8, kernel: 3}",
/// exactly as a `model.layers` entry (for tests and programs that build
/// models in code). Errors are InputErrors naming `where`.
LayerSpec parse_layer(const std::string& yaml, const std::string& where = "layer");

}  // namespace gpipe

/// Defines the registry entries of one file src/layers/<file>.cpp. Write it at
/// the start of a line inside namespace gpipe: CMake scans for it.
#define GPIPE_LAYER_ENTRIES(file) std::vector<::gpipe::LayerEntry> layer_entries_##file()

#include "gpipe/model/shapes.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"

namespace gpipe {

namespace {
constexpr std::int64_t kMaxTensorValues = 2147483647;  // 2^31 - 1
}  // namespace

std::int64_t Shape::size() const {
  if (dims.empty()) return 0;
  std::int64_t n = 1;
  for (auto d : dims)
    if (__builtin_mul_overflow(n, d, &n))
      throw InputError(fmt::format("shape {}: {} values overflow a 64-bit count", str(), fmt::join(dims, " x ")));
  return n;
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims, ", ")); }

Shape ModelSpec::input_shape() const { return input.rank() > 0 ? input : Shape{input_features}; }

std::vector<std::int64_t> ModelSpec::output_features() const {
  std::vector<std::int64_t> out;
  for (const auto& s : model_shapes(*this)) out.push_back(s.output.size());
  return out;
}

std::int64_t LayerShape::parameter_count() const {
  std::int64_t total = 0;
  for (const auto& p : parameters) total += p.size();
  return total;
}

std::int64_t LayerShape::state_count() const {
  std::int64_t total = 0;
  for (const auto& p : state) total += p.size();
  return total;
}

double LayerShape::flops(std::int64_t batch, bool input_gradient) const {
  return entry->flops(*spec.config, input, output, batch, input_gradient);
}

LayerShape layer_shape(const LayerSpec& spec, const Shape& input, std::int64_t index) {
  LayerShape s;
  s.index = index;
  s.spec = spec;
  s.entry = find_layer_entry(spec.type);
  if (!s.entry)
    throw InputError(fmt::format("{}: unknown layer type '{}' (expected one of: {})", spec.where,
                                 spec.type, fmt::join(layer_types(), ", ")));
  if (!s.spec.config) s.spec.config = std::make_shared<LayerConfig>();
  s.input = input;
  try {
    s.output = s.entry->output_shape(*s.spec.config, input);
  } catch (const ShapeMismatch& e) {
    throw InputError(fmt::format("{}: layer {} ({}) cannot take input shape {}: expected {}",
                                 spec.where, index, spec.type, input.str(), e.what()));
  }
  if (s.entry->parameters) s.parameters = s.entry->parameters(*s.spec.config, input);
  if (s.entry->saved) s.saved = s.entry->saved(*s.spec.config, input);
  if (s.entry->state) s.state = s.entry->state(*s.spec.config, input);
  // Every tensor the layer's keys size (its output per sample, each
  // parameter and state tensor, its saved state per sample) is a product of
  // keys and input extents (channels x height x width, tokens x width,
  // vocabulary x width, ...): checked here, before anything is allocated,
  // against the 2^31 - 1 values a message count, an HDF5 hyperslab or a
  // Kokkos Kernels call on one tensor may hold (as model.input's values per
  // sample are at the deck boundary).
  const auto check = [&](const std::vector<std::int64_t>& dims, const std::string& what) {
    std::int64_t n = 1;
    for (const auto d : dims)
      if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxTensorValues)
        throw InputError(fmt::format("{}: layer {} ({}) on input {}: its {} would have {} values, more than "
                                     "2^31 - 1; reduce the layer's sizes or the input",
                                     spec.where, index, spec.type, input.str(), what, fmt::join(dims, " x ")));
  };
  check(s.output.dims, fmt::format("output {}", s.output.str()));
  for (const auto& p : s.parameters)
    check({p.rows, p.cols}, fmt::format("parameter '{}' ({} x {})", p.name, p.rows, p.cols));
  for (const auto& p : s.state) check({p.rows, p.cols}, fmt::format("state '{}' ({} x {})", p.name, p.rows, p.cols));
  check({s.saved.per_sample}, "saved state per sample");
  check({s.saved.per_micro_batch}, "saved state per micro-batch");
  return s;
}

std::int64_t ModelSpec::labels_per_sample() const {
  if (loss.regression()) return 0;
  return loss.tokens() ? model_shapes(*this).back().output[0] : 1;
}

std::int64_t ModelSpec::vocabulary() const {
  return loss.tokens() ? model_shapes(*this).back().output[1] : classes();
}

std::vector<LayerShape> model_shapes(const ModelSpec& model) {
  const Shape input = model.input_shape();
  bool positive = input.rank() > 0;
  for (auto d : input.dims) positive = positive && d > 0;
  require(positive, fmt::format("model.input: expected a positive number of features or a list of "
                                "positive sizes such as [1, 28, 28], got {}",
                                input.rank() > 1 ? input.str() : std::to_string(input.size())));
  require(model.input_features == 0 || model.input_features == input.size(),
          fmt::format("model.input: shape {} has {} features, but input_features is {}", input.str(),
                      input.size(), model.input_features));
  require(!model.layers.empty(), "model.layers: expected at least one layer, got an empty list");
  std::vector<LayerShape> out;
  Shape shape = input;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    out.push_back(layer_shape(model.layers[i], shape, std::int64_t(i)));
    shape = out.back().output;
  }
  if (model.loss.tokens()) {
    require(shape.rank() == 2 && shape[1] >= 2,
            fmt::format("model.layers: token_cross_entropy needs a last layer that outputs (tokens, "
                        "vocabulary) logits with a vocabulary >= 2, got shape {} (end the model with "
                        "{{type: lm_head}})",
                        shape.str()));
    return out;
  }
  require(shape.rank() == 1, fmt::format("model.layers: the last layer must output a flat vector of "
                                         "{}, got shape {} (add {{type: flatten}})",
                                         model.loss.regression() ? "values" : "class logits",
                                         shape.str()));
  require(model.loss.regression() || shape.size() >= 2, fmt::format("model.layers: the last layer must output at least 2 class "
                                         "logits, got {}",
                                         shape.size()));
  return out;
}

}  // namespace gpipe

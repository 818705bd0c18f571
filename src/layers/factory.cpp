#include "gpipe/layers/factory.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"
#include "gpipe/layers/activations.hpp"
#include "gpipe/layers/dropout.hpp"
#include "gpipe/layers/layer_norm.hpp"

namespace gpipe {

const std::vector<std::string>& layer_types() {
  static const std::vector<std::string> types = {"dense", "relu", "gelu", "tanh", "layer_norm",
                                                 "dropout"};
  return types;
}

std::vector<std::int64_t> ModelSpec::output_features() const {
  require(input_features > 0,
          fmt::format("model.input: expected a positive number of features, got {}", input_features));
  require(!layers.empty(), "model.layers: expected at least one layer, got an empty list");
  std::vector<std::int64_t> out;
  std::int64_t features = input_features;
  for (const auto& spec : layers) {
    if (spec.type == "dense") {
      require(spec.units > 0, fmt::format("{}: dense.units: expected a positive integer, got {}",
                                          spec.where, spec.units));
      features = spec.units;
    } else if (spec.type == "dropout") {
      require(spec.rate >= 0 && spec.rate < 1,
              fmt::format("{}: dropout.rate: expected a value in [0, 1), got {}", spec.where,
                          spec.rate));
    } else if (spec.type == "layer_norm") {
      require(spec.eps > 0, fmt::format("{}: layer_norm.eps: expected a positive value, got {}",
                                        spec.where, spec.eps));
    } else if (spec.type != "relu" && spec.type != "gelu" && spec.type != "tanh") {
      throw InputError(fmt::format("{}: unknown layer type '{}' (expected one of: {})", spec.where,
                                   spec.type, fmt::join(layer_types(), ", ")));
    }
    out.push_back(features);
  }
  require(features >= 2, fmt::format("model.layers: the last layer must output at least 2 class "
                                     "logits, got {}",
                                     features));
  return out;
}

template <class T>
std::unique_ptr<Layer<T>> make_layer(const ModelSpec& model, std::int64_t index) {
  const auto out = model.output_features();
  const auto& spec = model.layers.at(size_t(index));
  const std::int64_t in = index == 0 ? model.input_features : out[size_t(index - 1)];
  if (spec.type == "dense") return std::make_unique<Dense<T>>(index, in, spec.units, spec.init);
  if (spec.type == "relu") return std::make_unique<ReLU<T>>(index, in);
  if (spec.type == "gelu") return std::make_unique<GELU<T>>(index, in);
  if (spec.type == "tanh") return std::make_unique<Tanh<T>>(index, in);
  if (spec.type == "layer_norm") return std::make_unique<LayerNorm<T>>(index, in, spec.eps);
  return std::make_unique<Dropout<T>>(index, in, spec.rate);  // validated above
}

template std::unique_ptr<Layer<float>> make_layer<float>(const ModelSpec&, std::int64_t);
template std::unique_ptr<Layer<double>> make_layer<double>(const ModelSpec&, std::int64_t);

}  // namespace gpipe

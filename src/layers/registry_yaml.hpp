#pragma once
// Internal: parsing a model.layers entry from its YAML node (io/deck.cpp).

#include <yaml-cpp/yaml.h>

#include "gpipe/layers/registry.hpp"

namespace gpipe {

/// Parses the map `node` (entry `path`, e.g. "model.layers[3]", of `file`)
/// through its type's registry entry. Throws InputError with positions for
/// a missing or unknown type, unknown keys and invalid values.
LayerSpec parse_layer_node(const YAML::Node& node, const std::string& file, const std::string& path);

}  // namespace gpipe

#include "gpipe/layers/registry.hpp"

#include <fmt/format.h>

#include <limits>

#include <algorithm>
#include <map>

#include "gpipe/core/error.hpp"
#include "registry_yaml.hpp"

namespace gpipe {

// The entries of every src/layers/*.cpp that defines GPIPE_LAYER_ENTRIES
// (a list CMake generates by scanning the sources).
#define GPIPE_LAYER_FILE(file) GPIPE_LAYER_ENTRIES(file);
#include "gpipe_layer_files.inc"
#undef GPIPE_LAYER_FILE

namespace {

const std::map<std::string, LayerEntry>& registry() {
  static const std::map<std::string, LayerEntry> entries = [] {
    std::map<std::string, LayerEntry> out;
    std::vector<std::vector<LayerEntry>> files;
#define GPIPE_LAYER_FILE(file) files.push_back(layer_entries_##file());
#include "gpipe_layer_files.inc"
#undef GPIPE_LAYER_FILE
    for (auto& list : files)
      for (auto& e : list) {
        if (out.count(e.name)) throw std::logic_error("gpipe: layer type '" + e.name + "' registered twice");
        out.emplace(e.name, std::move(e));
      }
    return out;
  }();
  return entries;
}

std::string position(const std::string& file, const YAML::Node& n) {
  const auto mark = n.Mark();
  return fmt::format("{}:{}:{}", file, mark.line + 1, mark.column + 1);
}

}  // namespace

const LayerEntry* find_layer_entry(const std::string& type) {
  const auto it = registry().find(type);
  return it == registry().end() ? nullptr : &it->second;
}

const std::vector<std::string>& layer_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const auto& kv : registry()) out.push_back(kv.first);
    return out;
  }();
  return types;
}

struct LayerKeys::Impl {
  YAML::Node node;
  std::string file;
  std::string path;  // "model.layers[3]"

  YAML::Node scalar(const std::string& key, const char* expected) const {
    const YAML::Node n = node[key];
    if (n && !n.IsScalar())
      throw InputError(fmt::format("{}: {}.{}: expected {}, got a {}", position(file, n), path, key,
                                   expected, n.IsSequence() ? "list" : "map"));
    return n;
  }
  template <class V>
  V as(const YAML::Node& n, const std::string& key, const char* expected) const {
    try {
      return n.as<V>();
    } catch (const YAML::Exception&) {
      throw InputError(fmt::format("{}: {}.{}: expected {}, got '{}'", position(file, n), path, key,
                                   expected, n.Scalar()));
    }
  }
};

bool LayerKeys::has(const std::string& key) const { return bool(impl_->node[key]); }

std::int64_t LayerKeys::integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                                const char* expected) const {
  const YAML::Node n = impl_->scalar(key, expected);
  if (!n) return fallback;
  const auto v = impl_->as<std::int64_t>(n, key, expected);
  if (v < min) fail(key, fmt::format("expected {}, got {}", expected, v));
  // Every layer size is an int-sized count (issue 25: no overflow in the
  // shape pass's products of sizes).
  if (v > std::int64_t(std::numeric_limits<int>::max()))
    fail(key, fmt::format("expected {} (at most 2^31 - 1), got {}", expected, v));
  return v;
}

std::int64_t LayerKeys::required_integer(const std::string& key, std::int64_t min,
                                         const char* expected) const {
  if (!has(key))
    throw InputError(fmt::format("{}: missing required field '{}.{}' ({})",
                                 position(impl_->file, impl_->node), impl_->path, key, expected));
  return integer(key, 0, min, expected);
}

double LayerKeys::number(const std::string& key, double fallback, double lo, double hi,
                         bool hi_open, const char* expected) const {
  const YAML::Node n = impl_->scalar(key, expected);
  if (!n) return fallback;
  const auto v = impl_->as<double>(n, key, expected);
  if (!(v >= lo && (hi_open ? v < hi : v <= hi))) fail(key, fmt::format("expected {}, got {}", expected, v));
  return v;
}

std::string LayerKeys::text(const std::string& key, const std::string& fallback,
                            const char* expected) const {
  const YAML::Node n = impl_->scalar(key, expected);
  return n ? n.Scalar() : fallback;
}

bool LayerKeys::flag(const std::string& key, bool fallback) const {
  const YAML::Node n = impl_->scalar(key, "true or false");
  return n ? impl_->as<bool>(n, key, "true or false") : fallback;
}

void LayerKeys::fail(const std::string& key, const std::string& problem) const {
  const YAML::Node n = impl_->node[key];
  throw InputError(fmt::format("{}: {}.{}: {}", position(impl_->file, n ? n : impl_->node),
                               impl_->path, key, problem));
}

LayerSpec parse_layer_node(const YAML::Node& node, const std::string& file, const std::string& path) {
  if (!node.IsMap())
    throw InputError(fmt::format("{}: {}: expected a map such as {{type: dense, units: 128}}",
                                 position(file, node), path));
  const YAML::Node t = node["type"];
  if (!t)
    throw InputError(fmt::format("{}: missing required field '{}.type' (a layer type)",
                                 position(file, node), path));
  if (!t.IsScalar())
    throw InputError(fmt::format("{}: {}.type: expected a layer type, got a {}", position(file, t),
                                 path, t.IsSequence() ? "list" : "map"));
  LayerSpec spec;
  spec.type = t.Scalar();
  spec.where = fmt::format("{} ({})", position(file, node), path);
  const LayerEntry* entry = find_layer_entry(spec.type);
  if (!entry)
    throw InputError(fmt::format("{}: unknown layer type '{}' (expected one of: {})", spec.where,
                                 spec.type, fmt::join(layer_types(), ", ")));
  std::map<std::string, YAML::Node> seen;  // a key may appear once (deck domains)
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    const auto first = seen.find(key);
    if (first != seen.end())
      throw InputError(fmt::format("{}: {}.{}: duplicate key (first given at {}; a key may appear "
                                   "once)",
                                   position(file, kv.first), path, key, position(file, first->second)));
    seen.emplace(key, kv.first);
    if (key != "type" && std::find(entry->keys.begin(), entry->keys.end(), key) == entry->keys.end()) {
      std::vector<std::string> allowed{"type"};
      allowed.insert(allowed.end(), entry->keys.begin(), entry->keys.end());
      throw InputError(fmt::format("{}: unknown key '{}' in {} (expected one of: {})",
                                   position(file, kv.first), key, path, fmt::join(allowed, ", ")));
    }
  }
  auto impl = std::make_shared<LayerKeys::Impl>();
  impl->node = node;
  impl->file = file;
  impl->path = path;
  spec.config = entry->parse ? entry->parse(LayerKeys(impl)) : std::make_shared<LayerConfig>();
  return spec;
}

LayerSpec parse_layer(const std::string& yaml, const std::string& where) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}:{}:{}: YAML syntax error: {}", where, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  return parse_layer_node(node, where, "layer");
}

}  // namespace gpipe

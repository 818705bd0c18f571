#include "gpipe/io/deck.hpp"

#include <fmt/format.h>

#include <regex>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <fstream>
#include <map>
#include <sstream>

#include "../layers/registry_yaml.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/kernels/backend.hpp"
#include "gpipe/optim/loss_scale.hpp"

namespace gpipe {

namespace {

// Schema: the keys each section accepts. Scalars listed here are settable.
const std::map<std::string, std::vector<std::string>>& schema() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"", {"seed", "precision", "kernels", "model", "data", "training", "optimizer", "pipeline", "parallel",
            "checkpoint", "trace"}},
      {"model", {"input", "layers", "loss", "huber_delta"}},
      {"data",
       {"format", "train_images", "train_labels", "test_images", "test_labels", "train_file",
        "test_file", "inputs_dataset", "labels_dataset", "targets_dataset", "normalize",
        "normalize_targets", "train_limit", "test_limit", "tokens_dataset", "sequence_length"}},
      {"training",
       {"epochs", "batch_size", "micro_batches", "shuffle", "progress_every", "nonfinite", "loss_scale",
        "loss_scale_growth_interval", "loss_scale_growth", "loss_scale_backoff"}},
      {"optimizer",
       {"type", "lr", "momentum", "beta1", "beta2", "eps", "weight_decay", "schedule", "warmup_steps",
        "clip_norm"}},
      {"pipeline", {"balance", "remat", "schedule", "schedule_file", "chunks", "w_group", "link", "memory_budget",
                    "activation_storage", "wait", "tf32"}},
      {"pipeline.link", {"latency_us", "bandwidth_gbps"}},
      {"parallel", {"cells", "placement", "deterministic_reduction", "bucket_kib"}},
      {"checkpoint", {"directory", "every_steps", "every_epochs", "keep"}},
      {"trace", {"file", "every"}},
  };
  return keys;
}

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// The documented domain of every scalar key (docs/input-deck.md lists the
// same text): checked at parse time, with the range in every message.
struct Domain {
  enum Kind { Integer, Number, Choice, Text, Boolean } kind = Text;
  std::int64_t min = 0, max = std::numeric_limits<std::int64_t>::max();  // Integer
  bool unsigned64 = false;  // Integer: [0, 2^64 - 1] (seed)
  double low = 0, high = 0;           // Number: finite, in the interval below
  bool low_open = false, high_open = false, bounded_above = false;
  std::vector<std::string> choices;   // Choice
  bool empty_allowed = false;         // Text: "" is a valid value
  std::string description;            // what describe() says instead (Text: instead of "a path")

  std::string describe() const {
    if (!description.empty() && kind != Text) return description;
    switch (kind) {
      case Integer:
        if (unsigned64) return "an integer in [0, 2^64 - 1]";
        if (max == std::numeric_limits<std::int64_t>::max())
          return fmt::format("an integer >= {}", min);
        if (max == kIntMax) return fmt::format("an integer in [{}, 2^31 - 1]", min);
        return fmt::format("an integer in [{}, {}]", min, max);
      case Number:
        if (!bounded_above)
          return fmt::format("a finite number {} {}", low_open ? ">" : ">=", low);
        return fmt::format("a number in {}{}, {}{}", low_open ? "(" : "[", low, high,
                           high_open ? ")" : "]");
      case Choice: {
        std::string out;
        for (size_t i = 0; i < choices.size(); ++i)
          out += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
        return out;
      }
      case Boolean: return "true or false";
      case Text:
        if (!description.empty()) return description;
        return empty_allowed ? "a path (\"\" for none)" : "a non-empty path";
    }
    return "";
  }
  bool contains(double v) const {
    return std::isfinite(v) && (low_open ? v > low : v >= low) &&
           (!bounded_above || (high_open ? v < high : v <= high));
  }
};

Domain integer(std::int64_t min, std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
  Domain d;
  d.kind = Domain::Integer;
  d.min = min;
  d.max = max;
  return d;
}
Domain number(double low, bool low_open) {
  Domain d;
  d.kind = Domain::Number;
  d.low = low;
  d.low_open = low_open;
  return d;
}
Domain fraction() {  // [0, 1)
  Domain d = number(0, false);
  d.bounded_above = true;
  d.high = 1;
  d.high_open = true;
  return d;
}
Domain choice(std::vector<std::string> options) {
  Domain d;
  d.kind = Domain::Choice;
  d.choices = std::move(options);
  return d;
}
Domain text(bool empty_allowed) {
  Domain d;
  d.kind = Domain::Text;
  d.empty_allowed = empty_allowed;
  return d;
}

const std::map<std::string, Domain>& domains() {
  static const std::map<std::string, Domain> table = [] {
    std::map<std::string, Domain> t;
    t["seed"] = integer(0);
    t["seed"].unsigned64 = true;
    t["precision"] = choice(std::vector<std::string>(precision_names(), precision_names() + kPrecisionCount));
    // Every word; kernels::parse_choice then refuses one this build lacks, saying why.
    t["kernels"] = choice({"auto", "portable", "onednn", "cublas", "cudnn"});
    t["data.format"] = choice({"idx", "hdf5", "tokens"});
    t["data.sequence_length"] = integer(1, kIntMax);
    t["model.loss"] = choice({"softmax_cross_entropy", "token_cross_entropy", "mse", "mae", "huber"});
    t["model.huber_delta"] = number(0, true);
    for (const char* k : {"train_images", "train_labels", "test_images", "test_labels",
                          "train_file", "test_file", "inputs_dataset", "labels_dataset",
                          "targets_dataset", "tokens_dataset"})
      t[std::string("data.") + k] = text(false);
    t["data.normalize"] = choice({"none", "scale", "standardize", "standardize_per_feature"});
    t["data.normalize_targets"] = choice({"none", "standardize"});
    t["data.train_limit"] = integer(0);
    t["data.test_limit"] = integer(0);
    // epochs x samples (the learning-rate horizon) must fit 64 bits.
    t["training.epochs"] = integer(1, kIntMax);
    t["training.batch_size"] = integer(1, kIntMax);
    t["training.micro_batches"] = integer(1, kIntMax);
    t["training.shuffle"].kind = Domain::Boolean;
    t["training.progress_every"] = integer(0);
    t["training.nonfinite"] = choice({"abort", "skip_step", "ignore"});
    t["training.loss_scale"] = number(LossScaler::kMinScale, false);  // [2^-24, 2^64]: gpipe/optim/loss_scale.hpp
    t["training.loss_scale"].bounded_above = true;
    t["training.loss_scale"].high = LossScaler::kMaxScale;
    t["training.loss_scale"].description = "a number in [2^-24, 2^64]";
    t["training.loss_scale_growth_interval"] = integer(1);
    t["training.loss_scale_growth"] = number(1, false);
    t["training.loss_scale_backoff"] = number(0, true);
    t["optimizer.type"] = choice(optimizer_types());
    t["optimizer.lr"] = number(0, true);
    t["optimizer.momentum"] = fraction();
    t["optimizer.beta1"] = fraction();
    t["optimizer.beta2"] = fraction();
    t["optimizer.eps"] = number(0, true);
    t["optimizer.weight_decay"] = number(0, false);
    t["optimizer.schedule"] = choice({"constant", "cosine"});
    t["optimizer.warmup_steps"] = integer(0);
    t["optimizer.clip_norm"] = number(0, false);
    t["pipeline.remat"] = choice({"never", "always", "except_last"});
    t["pipeline.schedule"] = choice({"fill_drain", "1f1b", "zero_bubble", "interleaved_1f1b", "zb_v", "dualpipe_v"});
    t["pipeline.schedule_file"] = text(true);
    t["pipeline.chunks"] = integer(1, 1024);
    t["pipeline.w_group"] = integer(1, 1 << 20);
    t["pipeline.activation_storage"] = choice({"auto", "float"});
    t["pipeline.wait"] = choice({"spin", "sleep"});
    t["pipeline.tf32"].kind = Domain::Boolean;
    t["pipeline.memory_budget"] = text(false);  // a byte size: parse_byte_size
    t["pipeline.memory_budget"].description = "a byte size such as 512MiB or 2GiB";
    t["pipeline.link.latency_us"] = number(0, false);
    t["pipeline.link.bandwidth_gbps"] = number(0, true);
    t["parallel.cells"] = integer(0, kIntMax);
    t["parallel.placement"] = choice({"replica", "pipeline"});
    t["parallel.deterministic_reduction"].kind = Domain::Boolean;
    t["parallel.bucket_kib"] = integer(1, kIntMax);  // x 1024 bytes fits 64 bits
    t["checkpoint.directory"] = text(true);
    t["checkpoint.every_steps"] = integer(0);
    t["checkpoint.every_epochs"] = integer(0);
    t["checkpoint.keep"] = integer(1, kIntMax);
    t["trace.file"] = text(true);
    t["trace.every"] = integer(1);
    return t;
  }();
  return table;
}

// Reads typed values from one YAML map, with positions in every message.
class Section {
 public:
  // `overridden`: the values given with --set (their YAML marks point into
  // the --set text, not the deck); owned by parse_deck, outlives the section.
  Section(const YAML::Node& node, std::string path, std::string file,
          const std::vector<YAML::Node>* overridden)
      : node_(node), path_(std::move(path)), file_(std::move(file)), overridden_(overridden) {}

  // "file:line:column" of a node, or "file (--set)" for an overridden value.
  std::string where(const YAML::Node& n) const {
    if (overridden_)
      for (const auto& o : *overridden_)
        if (n.IsDefined() && o.is(n)) return file_ + " (--set)";
    const auto mark = n.Mark();
    return fmt::format("{}:{}:{}", file_, mark.line + 1, mark.column + 1);
  }
  // Position of `key` itself in this map (that of `value` if given by --set).
  std::string where_key(const std::string& key, const YAML::Node& value) const {
    const std::string w = where(value);
    if (w.size() >= 7 && w.compare(w.size() - 7, 7, "(--set)") == 0) return w;
    for (const auto& kv : node_)
      if (kv.first.as<std::string>() == key) return where(kv.first);
    return w;
  }
  std::string field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  bool has(const std::string& key) const { return bool(node_[key]); }
  YAML::Node raw(const std::string& key) const { return node_[key]; }

  template <class V>
  V get(const std::string& key, const V& fallback, const char* expected) const {
    const YAML::Node n = node_[key];
    if (!n) return fallback;
    return convert<V>(n, key, expected);
  }
  template <class V>
  V need(const std::string& key, const char* expected) const {
    const YAML::Node n = node_[key];
    if (!n)
      throw InputError(fmt::format("{}: missing required field '{}' ({})", where(node_), field(key),
                                   expected));
    return convert<V>(n, key, expected);
  }
  template <class V>
  V convert(const YAML::Node& n, const std::string& key, const std::string& expected) const {
    if (n.IsNull())  // an empty value has no position of its own: its key's
      throw InputError(fmt::format("{}: {}: expected {}, got an empty value", where_key(key, n),
                                   field(key), expected));
    if (!n.IsScalar())
      throw InputError(fmt::format("{}: {}: expected {}, got a {}", where(n), field(key), expected,
                                   n.IsSequence() ? "list" : "map"));
    try {
      return n.as<V>();
    } catch (const YAML::Exception&) {
      throw InputError(fmt::format("{}: {}: expected {}, got '{}'", where(n), field(key), expected,
                                   n.Scalar()));
    }
  }
  // The value of `key` (or `fallback` when absent), checked against its
  // documented domain (domains()): type, range, finiteness, empty values.
  template <class V>
  V value(const std::string& key, const V& fallback) const {
    const YAML::Node n = node_[key];
    if (!n) return fallback;
    return checked<V>(n, key);
  }
  template <class V>
  V required(const std::string& key) const {
    const Domain& d = domains().at(field(key));
    if (!node_[key])
      throw InputError(fmt::format("{}: missing required field '{}' ({})", where(node_), field(key),
                                   d.describe()));
    return checked<V>(node_[key], key);
  }
  template <class V>
  V checked(const YAML::Node& n, const std::string& key) const {
    const Domain& d = domains().at(field(key));
    const std::string expected = d.describe();
    const V v = convert<V>(n, key, expected);
    bool ok = true;
    if constexpr (std::is_same_v<V, std::string>) {
      if (d.kind == Domain::Choice)
        ok = std::find(d.choices.begin(), d.choices.end(), v) != d.choices.end();
      else if (d.kind == Domain::Text)
        ok = d.empty_allowed || !v.empty();
      if (!ok)
        throw InputError(fmt::format("{}: {}: expected {}, got '{}'", where(n), field(key), expected,
                                     v));
    } else if constexpr (std::is_floating_point_v<V>) {
      if (!d.contains(double(v)))
        throw InputError(fmt::format("{}: {}: expected {}, got {}", where(n), field(key), expected,
                                     n.Scalar()));
    } else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
      if (std::int64_t(v) < d.min || std::int64_t(v) > d.max)
        throw InputError(fmt::format("{}: {}: expected {}, got {}", where(n), field(key), expected,
                                     v));
    }
    return v;
  }
  // Throws for keys outside `allowed` and for a key given twice.
  void only(const std::vector<std::string>& allowed) const {
    std::map<std::string, YAML::Node> seen;
    for (const auto& kv : node_) {
      const auto key = kv.first.as<std::string>();
      const auto first = seen.find(key);
      if (first != seen.end())
        throw InputError(fmt::format("{}: {}: duplicate key (first given at {}; a key may appear "
                                     "once)",
                                     where(kv.first), field(key), where(first->second)));
      seen.emplace(key, kv.first);
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        throw InputError(fmt::format("{}: unknown key '{}' in {} (expected one of: {})",
                                     where(kv.first), key, path_.empty() ? "the deck" : path_,
                                     fmt::join(allowed, ", ")));
    }
  }
  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }
  const std::vector<YAML::Node>* overridden() const { return overridden_; }

 private:
  YAML::Node node_;
  std::string path_;
  std::string file_;
  const std::vector<YAML::Node>* overridden_ = nullptr;
};

Section section(const YAML::Node& root, const std::string& key, const std::string& file,
                bool required, const std::vector<YAML::Node>* overridden) {
  const YAML::Node n = root[key];
  if (!n) {
    if (required)
      throw InputError(fmt::format("{}: missing required section '{}'", file, key));
    return Section(YAML::Node(YAML::NodeType::Map), key, file, overridden);
  }
  if (!n.IsMap()) {
    const auto mark = n.Mark();
    throw InputError(fmt::format("{}:{}:{}: {}: expected a map of settings", file, mark.line + 1,
                                 mark.column + 1, key));
  }
  Section s(n, key, file, overridden);
  s.only(schema().at(key));
  return s;
}

void positive(bool ok, const Section& s, const std::string& key, std::int64_t value) {
  if (!ok)
    throw InputError(fmt::format("{}: {}: expected a positive integer, got {}", s.where(s.raw(key)),
                                 s.field(key), value));
}

ModelSpec read_model(const Section& s) {
  ModelSpec model;
  const YAML::Node input = s.raw("input");
  if (!input)
    throw InputError(fmt::format("{}: missing required field 'model.input' (a positive number of "
                                 "input features, or a shape such as [1, 28, 28])",
                                 s.where(s.node())));
  const std::string expected = "a positive number of features or a list of positive sizes such as [1, 28, 28]";
  if (input.IsSequence() && input.size() > 0) {
    for (const auto& d : input) {
      std::int64_t v = 0;
      try {
        v = d.as<std::int64_t>();
      } catch (const YAML::Exception&) {
        v = 0;
      }
      if (v <= 0 || !d.IsScalar())
        throw InputError(fmt::format("{}: model.input: expected {}, got '{}'", s.where(d), expected,
                                     d.IsScalar() ? d.Scalar() : "a nested value"));
      if (v > kIntMax)
        throw InputError(fmt::format("{}: model.input: expected sizes in [1, 2^31 - 1], got {}",
                                     s.where(d), v));
      model.input.dims.push_back(v);
    }
    std::int64_t product = 1;
    for (const auto v : model.input.dims)
      if (__builtin_mul_overflow(product, v, &product) || product > kIntMax)
        throw InputError(fmt::format("{}: model.input: {} values per sample, more than 2^31 - 1",
                                     s.where(input), fmt::join(model.input.dims, " x ")));
  } else {
    const auto features = s.convert<std::int64_t>(input, "input", expected.c_str());
    positive(features > 0, s, "input", features);
    if (features > kIntMax)
      throw InputError(fmt::format("{}: model.input: {} features, more than 2^31 - 1", s.where(input),
                                   features));
    model.input = Shape{features};
  }
  model.input_features = model.input.size();
  const YAML::Node layers = s.raw("layers");
  if (!layers)
    throw InputError(fmt::format("{}: missing required field 'model.layers' (a list of layers)",
                                 s.where(s.node())));
  if (!layers.IsSequence() || layers.size() == 0)
    throw InputError(fmt::format("{}: model.layers: expected a non-empty list of layers",
                                 s.where(layers)));
  for (size_t i = 0; i < layers.size(); ++i)
    model.layers.push_back(
        parse_layer_node(layers[i], s.file(), fmt::format("model.layers[{}]", i)));
  model.loss.type = s.value<std::string>("loss", model.loss.type);
  const auto& l = model.loss.type;
  model.loss.huber_delta = s.value<double>("huber_delta", 1.0);
  if (s.has("huber_delta") && l != "huber")
    throw InputError(fmt::format("{}: model.huber_delta: only the huber loss has a delta (model.loss "
                                 "is {})",
                                 s.where(s.raw("huber_delta")), l));
  model_shapes(model);  // validates every layer's input shape
  return model;
}

DataSpec read_data(const Section& d, const ModelSpec& model) {
  DataSpec data;
  data.format = d.value<std::string>("format", "idx");
  if (data.format == "idx") {
    data.train_images = d.required<std::string>("train_images");
    data.train_labels = d.required<std::string>("train_labels");
    data.test_images = d.required<std::string>("test_images");
    data.test_labels = d.required<std::string>("test_labels");
  } else {
    data.train_file = d.required<std::string>("train_file");
    data.test_file = d.required<std::string>("test_file");
    data.inputs_dataset = d.value<std::string>("inputs_dataset", "inputs");
    data.labels_dataset = d.value<std::string>("labels_dataset", "labels");
    data.targets_dataset = d.value<std::string>("targets_dataset", "targets");
  }
  if (data.format == "tokens") {
    data.tokens_dataset = d.value<std::string>("tokens_dataset", "tokens");
    data.sequence_length = d.value<std::int64_t>("sequence_length", model.input_features);
    if (!model.loss.tokens())
      throw InputError(fmt::format("{}: data.format: tokens feeds a language model: set model.loss to "
                                   "token_cross_entropy (model.loss is {})",
                                   d.where(d.raw("format")), model.loss.type));
    if (data.sequence_length != model.input_features)
      throw InputError(fmt::format("{}: data.sequence_length: {} tokens per sample, but model.input is "
                                   "{} (one token id per input column)",
                                   d.where(d.raw("sequence_length")), data.sequence_length,
                                   model.input_features));
    if (model.labels_per_sample() != data.sequence_length)
      throw InputError(fmt::format("{}: data.sequence_length: {} tokens per sample, but the model's last "
                                   "layer outputs logits for {} tokens",
                                   d.where(d.raw("format")), data.sequence_length,
                                   model.labels_per_sample()));
    if (d.has("normalize") && d.value<std::string>("normalize", "none") != "none")
      throw InputError(fmt::format("{}: data.normalize: token ids are never normalized (expected none "
                                   "or no key for data.format: tokens)",
                                   d.where(d.raw("normalize"))));
  } else if (model.loss.tokens()) {
    throw InputError(fmt::format("{}: model.loss: token_cross_entropy reads a label per token, which "
                                 "only data.format: tokens provides",
                                 d.where(d.raw("format") ? d.raw("format") : d.node())));
  }
  data.normalize = d.value<std::string>("normalize", data.format == "tokens" ? "none" : "standardize");
  if (data.format == "hdf5" && data.normalize == "scale")
    throw InputError(fmt::format("{}: data.normalize: 'scale' (x/255) is for IDX images; expected "
                                 "none, standardize or standardize_per_feature for HDF5 data",
                                 d.where(d.raw("normalize"))));
  data.regression = model.loss.regression();
  data.normalize_targets = d.value<std::string>("normalize_targets", "none");
  if (d.has("normalize_targets") && !data.regression)
    throw InputError(fmt::format("{}: data.normalize_targets: only regression losses read float "
                                 "targets (model.loss is {})",
                                 d.where(d.raw("normalize_targets")), model.loss.type));
  data.train_limit = d.value<std::int64_t>("train_limit", 0);
  data.test_limit = d.value<std::int64_t>("test_limit", 0);
  return data;
}

TrainingSpec read_training(const Section& t) {
  TrainingSpec training;
  training.epochs = t.required<std::int64_t>("epochs");
  training.batch_size = t.required<std::int64_t>("batch_size");
  training.micro_batches = t.value<int>("micro_batches", 1);
  if (training.micro_batches > training.batch_size)
    throw InputError(fmt::format("{}: training.micro_batches: {} micro-batches cannot split a "
                                 "batch of {} samples (expected an integer in [1, "
                                 "training.batch_size])",
                                 t.where(t.raw("micro_batches")), training.micro_batches,
                                 training.batch_size));
  training.shuffle = t.value<bool>("shuffle", true);
  training.progress_every = t.value<std::int64_t>("progress_every", 50);
  const auto nonfinite = t.value<std::string>("nonfinite", "abort");
  training.nonfinite = nonfinite == "ignore"      ? NonFinite::Ignore
                       : nonfinite == "skip_step" ? NonFinite::SkipStep
                                                  : NonFinite::Abort;
  training.loss_scale = t.value<double>("loss_scale", training.loss_scale);
  training.loss_scale_growth_interval =
      t.value<std::int64_t>("loss_scale_growth_interval", training.loss_scale_growth_interval);
  training.loss_scale_growth = t.value<double>("loss_scale_growth", training.loss_scale_growth);
  training.loss_scale_backoff = t.value<double>("loss_scale_backoff", training.loss_scale_backoff);
  if (training.loss_scale_backoff >= 1.0)
    throw InputError(fmt::format("{}: training.loss_scale_backoff: {} does not back off (expected a number in (0, 1))",
                                 t.where(t.raw("loss_scale_backoff")), training.loss_scale_backoff));
  return training;
}

OptimizerSpec read_optimizer(const Section& o) {
  OptimizerSpec opt;
  opt.type = o.value<std::string>("type", opt.type);
  opt.lr = o.value<double>("lr", opt.lr);
  opt.momentum = o.value<double>("momentum", opt.momentum);
  opt.beta1 = o.value<double>("beta1", opt.beta1);
  opt.beta2 = o.value<double>("beta2", opt.beta2);
  opt.eps = o.value<double>("eps", opt.eps);
  opt.weight_decay = o.value<double>("weight_decay", opt.weight_decay);
  opt.schedule = o.value<std::string>("schedule", opt.schedule);
  opt.warmup_steps = o.value<std::int64_t>("warmup_steps", opt.warmup_steps);
  opt.clip_norm = o.value<double>("clip_norm", opt.clip_norm);
  return opt;
}

PipelineSpec read_pipeline(const Section& p) {
  PipelineSpec pipeline;
  if (p.has("balance")) {
    const YAML::Node b = p.raw("balance");
    if (b.IsSequence()) {
      pipeline.balance = "explicit";
      for (const auto& c : b) {
        int count = 0;
        try {
          count = c.as<int>();
        } catch (const YAML::Exception&) {
          count = 0;
        }
        if (count < 1)
          throw InputError(fmt::format("{}: pipeline.balance: expected a list of layer counts per "
                                       "cell, each an integer >= 1, got '{}'",
                                       p.where(b).find("(--set)") != std::string::npos ? p.where(b)
                                                                                       : p.where(c),
                                       c.IsScalar() ? c.Scalar() : "a list or map"));
        pipeline.counts.push_back(count);
      }
    } else {
      pipeline.balance = p.convert<std::string>(b, "balance", "params, flops, time or a list");
      if (pipeline.balance != "params" && pipeline.balance != "flops" && pipeline.balance != "time")
        throw InputError(fmt::format("{}: pipeline.balance: unknown mode '{}' (expected params, "
                                     "flops, time, or a list of layer counts per cell)",
                                     p.where(b), pipeline.balance));
    }
  }
  const auto remat = p.value<std::string>("remat", "never");
  pipeline.remat = parse_remat(remat, "pipeline.remat");
  pipeline.schedule = parse_schedule(p.value<std::string>("schedule", "fill_drain"), "pipeline.schedule");
  pipeline.schedule_file = p.value<std::string>("schedule_file", "");
  pipeline.chunks = p.value<int>("chunks", 1);
  pipeline.w_group = p.value<int>("w_group", 1);
  pipeline.activation_storage16 = p.value<std::string>("activation_storage", "auto") == "auto";
  pipeline.wait_sleep = p.value<std::string>("wait", "spin") == "sleep";
  pipeline.tf32 = p.value<bool>("tf32", false);
  if (p.has("memory_budget"))
    pipeline.memory_budget = parse_byte_size(p.value<std::string>("memory_budget", ""),
                                             p.where(p.raw("memory_budget")) + ": pipeline.memory_budget");
  if (p.has("link")) {
    const YAML::Node n = p.raw("link");
    if (!n.IsMap())
      throw InputError(fmt::format("{}: pipeline.link: expected a map of settings (latency_us, "
                                   "bandwidth_gbps)",
                                   p.where(n)));
    const Section link(n, "pipeline.link", p.file(), p.overridden());
    link.only(schema().at("pipeline.link"));
    pipeline.link.bandwidth_gbps = link.required<double>("bandwidth_gbps");
    pipeline.link.latency_us = link.value<double>("latency_us", 0.0);
  }
  return pipeline;
}

ParallelSpec read_parallel(const Section& par) {
  ParallelSpec parallel;
  parallel.cells = par.value<int>("cells", 0);  // 0 = all ranks
  parallel.placement = par.value<std::string>("placement", "replica");
  parallel.deterministic_reduction = par.value<bool>("deterministic_reduction", false);
  parallel.bucket_kib = par.value<std::int64_t>("bucket_kib", 256);
  return parallel;
}

// Applies "key=value" to the deck; returns the node now holding the value.
YAML::Node apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(fmt::format("--set '{}': expected key=value, e.g. --set optimizer.lr=0.01",
                                 assignment));
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  const auto& keys = settable_keys();
  if (std::find(keys.begin(), keys.end(), key) == keys.end())
    throw InputError(fmt::format("unknown --set key '{}' (known keys: {})", key, fmt::join(keys, ", ")));
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("--set {}: value '{}' is not valid YAML: {}", key, value, e.msg));
  }
  const auto dot = key.find('.');
  if (dot == std::string::npos) {
    root[key] = parsed;
  } else {
    YAML::Node sec = root[key.substr(0, dot)];
    std::string rest = key.substr(dot + 1);
    for (auto next = rest.find('.'); next != std::string::npos; next = rest.find('.')) {
      sec.reset(sec[rest.substr(0, next)]);  // pipeline.link.latency_us: a nested map (rebind, not assign)
      rest = rest.substr(next + 1);
    }
    sec[rest] = parsed;
  }
  return parsed;
}

}  // namespace

void check_micro_batch_statistics(const ModelSpec& model, std::int64_t rows, const std::string& why) {
  for (const auto& layer : model_shapes(model)) {
    if (layer.type() != "batchnorm2d") continue;  // the one layer with batch statistics
    const auto& in = layer.input.dims;
    const std::int64_t pixels = in.size() == 3 ? in[1] * in[2] : 1;
    if (rows * pixels >= 2) continue;
    throw InputError(fmt::format(
        "model.layers[{}] (batchnorm2d): its batch statistics are undefined for micro-batches of {} "
        "row{} ({}): input {} gives {} value{} per channel per micro-batch, and the variance needs at "
        "least 2 (the output would be the constant beta); use fewer micro-batches or a larger batch",
        layer.index, rows, rows == 1 ? "" : "s", why, layer.input.str(), rows * pixels,
        rows * pixels == 1 ? "" : "s"));
  }
}

std::string key_domain(const std::string& key) {
  const auto d = domains().find(key);
  if (d == domains().end()) throw InputError(fmt::format("no documented domain for key '{}'", key));
  return d->second.describe();
}

const std::vector<std::string>& settable_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& [sec, names] : schema())
      for (const auto& name : names) {
        if (sec.empty() && name != "seed" && name != "precision" && name != "kernels") continue;
        if (sec == "model" && name != "loss" && name != "huber_delta") continue;
        if (sec == "pipeline" && name == "link") continue;  // a map: its keys are settable
        out.push_back(sec.empty() ? name : sec + "." + name);
      }
    return out;
  }();
  return keys;
}

namespace {
// fp16's dynamic loss scaling (gpipe/optim/loss_scale.hpp) is their only reader.
constexpr const char* kLossScaleKeys[] = {"loss_scale", "loss_scale_growth_interval", "loss_scale_growth",
                                          "loss_scale_backoff"};

// How strictly parse reads a deck: a deck file (Strict), a caller that passes
// the data itself (NoData), a deck stored in a checkpoint (Stored: no data
// needed, and the rules of parse_stored_deck relaxed).
enum class Rules { Strict, NoData, Stored };

Deck parse(const std::string& text, const std::string& name, const std::vector<std::string>& overrides,
           Rules rules) {
  const bool data_required = rules == Rules::Strict;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  if (!root.IsMap())
    throw InputError(fmt::format("{}: expected a YAML map of sections (model, data, training, "
                                 "optimizer, pipeline)",
                                 name));
  std::vector<YAML::Node> overridden;  // the --set values, for positions in messages
  for (const auto& o : overrides) overridden.push_back(apply_override(root, o));
  Section top(root, "", name, &overridden);
  top.only(schema().at(""));

  Deck deck;
  deck.path = name;
  deck.seed = top.value<std::uint64_t>("seed", 0);
  deck.precision = top.value<std::string>("precision", "float");
  deck.kernels = top.value<std::string>("kernels", "auto");
  kernels::parse_choice(deck.kernels, name + ": kernels");  // e.g. onednn in a build without it

  // A stored deck: the loss-scale keys of a precision without loss scaling
  // are dropped unread (an earlier version accepted them with bf16 or float
  // and ignored them, as this run would).
  if (rules == Rules::Stored && !precision_policy(deck.precision).loss_scaling)
    if (YAML::Node t = static_cast<const YAML::Node&>(root)["training"]; t && t.IsMap())
      for (const char* key : kLossScaleKeys) t.remove(key);

  deck.model = read_model(section(root, "model", name, true, &overridden));
  if (data_required || root["data"])
    deck.data = read_data(section(root, "data", name, true, &overridden), deck.model);
  const Section training = section(root, "training", name, true, &overridden);
  deck.training = read_training(training);
  // fp16's dynamic loss scaling is the only user of training.loss_scale*: the
  // keys with another precision would be read by nothing (a deck meant for
  // fp16 running bf16 or float without saying so).
  if (!precision_policy(deck.precision).loss_scaling)
    for (const char* key : kLossScaleKeys)
      if (training.has(key))
        throw InputError(fmt::format("{}: training.{}: dynamic loss scaling is for precision fp16 only (precision "
                                     "is {}); remove the key or set precision: fp16",
                                     training.where_key(key, training.raw(key)), key, deck.precision));
  {
    const auto& t = deck.training;
    check_micro_batch_statistics(
        deck.model, t.batch_size / t.micro_batches,
        fmt::format("training.micro_batches = {} of a {}-sample batch", t.micro_batches, t.batch_size));
  }
  deck.optimizer = read_optimizer(section(root, "optimizer", name, false, &overridden));
  deck.pipeline = read_pipeline(section(root, "pipeline", name, false, &overridden));
  deck.parallel = read_parallel(section(root, "parallel", name, false, &overridden));

  const Section c = section(root, "checkpoint", name, false, &overridden);
  deck.checkpoint.directory = c.value<std::string>("directory", "");
  deck.checkpoint.every_steps = c.value<std::int64_t>("every_steps", 0);
  deck.checkpoint.every_epochs = c.value<std::int64_t>("every_epochs", 1);
  deck.checkpoint.keep = c.value<int>("keep", 2);

  const Section tr = section(root, "trace", name, false, &overridden);
  deck.trace.file = tr.value<std::string>("file", "");
  deck.trace.every = tr.value<std::int64_t>("every", 10);

  YAML::Emitter out;
  out << root;
  deck.text = out.c_str();
  return deck;
}
}  // namespace

Deck parse_deck(const std::string& text, const std::string& name,
                const std::vector<std::string>& overrides) {
  return parse(text, name, overrides, Rules::Strict);
}

Deck parse_stored_deck(const std::string& text, const std::string& name,
                       const std::vector<std::string>& overrides) {
  return parse(text, name, overrides, Rules::Stored);
}

Deck parse_model_deck(const std::string& text, const std::string& name,
                      const std::vector<std::string>& overrides) {
  return parse(text, name, overrides, Rules::NoData);
}

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open input deck (missing or unreadable)", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_deck(text.str(), path, overrides);
}

Deck load_model_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open input deck (missing or unreadable)", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_deck(text.str(), path, overrides);
}

std::int64_t parse_byte_size(const std::string& text, const std::string& field) {
  static const std::regex pattern(R"(^\s*([0-9]+(\.[0-9]+)?)\s*([A-Za-z]*)\s*$)");
  std::smatch m;
  const auto fail = [&](const std::string& why) {
    return InputError(fmt::format("{}: expected a byte size such as 512MiB, 2GiB or 800MB (units B, KiB, MiB, "
                                  "GiB, TiB, kB, MB, GB, TB), got '{}'{}",
                                  field, text, why.empty() ? "" : " (" + why + ")"));
  };
  if (!std::regex_match(text, m, pattern)) throw fail("");
  const double value = std::strtod(m[1].str().c_str(), nullptr);
  const std::string unit = m[3].str();
  static const std::vector<std::pair<std::string, double>> units = {
      {"", 1},           {"B", 1},          {"KiB", 1024.0},      {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"kB", 1e3}, {"KB", 1e3},          {"MB", 1e6},        {"GB", 1e9},
      {"TB", 1e12}};
  const auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (it == units.end()) throw fail(fmt::format("unknown unit '{}'", unit));
  if (unit.empty() || unit == "B")
    if (m[2].matched) throw fail("a number of bytes must be an integer");
  const double bytes = value * it->second;
  if (!(bytes >= 1)) throw fail("it must be at least 1 byte");
  if (bytes > 9.0e18) throw fail("more than 2^63 bytes");
  return std::int64_t(std::llround(bytes));
}

std::string format_bytes(std::int64_t bytes) {
  const double b = double(bytes);
  if (b >= double(1LL << 30)) return fmt::format("{:.2f} GiB", b / double(1LL << 30));
  if (b >= double(1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", b / 1024);
  return fmt::format("{} B", bytes);
}

}  // namespace gpipe

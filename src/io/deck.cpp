#include "gpipe/io/deck.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "../layers/registry_yaml.hpp"
#include "gpipe/core/error.hpp"

namespace gpipe {

namespace {

// Schema: the keys each section accepts. Scalars listed here are settable.
const std::map<std::string, std::vector<std::string>>& schema() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"", {"seed", "precision", "model", "data", "training", "optimizer", "pipeline", "parallel",
            "checkpoint", "trace"}},
      {"model", {"input", "layers", "loss", "huber_delta"}},
      {"data",
       {"format", "train_images", "train_labels", "test_images", "test_labels", "train_file",
        "test_file", "inputs_dataset", "labels_dataset", "targets_dataset", "normalize",
        "normalize_targets", "train_limit", "test_limit"}},
      {"training", {"epochs", "batch_size", "micro_batches", "shuffle", "progress_every"}},
      {"optimizer",
       {"type", "lr", "momentum", "beta1", "beta2", "eps", "weight_decay", "schedule"}},
      {"pipeline", {"balance", "remat", "schedule"}},
      {"parallel", {"cells", "placement", "deterministic_reduction", "bucket_kib"}},
      {"checkpoint", {"directory", "every_steps", "every_epochs", "keep"}},
      {"trace", {"file", "every"}},
  };
  return keys;
}

// Values given with --set: their YAML marks point into the --set text, not the deck.
thread_local std::vector<YAML::Node> overridden_nodes;

// Reads typed values from one YAML map, with positions in every message.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string file)
      : node_(node), path_(std::move(path)), file_(std::move(file)) {}

  // "file:line:column" of a node, or "file (--set)" for an overridden value.
  std::string where(const YAML::Node& n) const {
    for (const auto& o : overridden_nodes)
      if (n.IsDefined() && o.is(n)) return file_ + " (--set)";
    const auto mark = n.Mark();
    return fmt::format("{}:{}:{}", file_, mark.line + 1, mark.column + 1);
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
  V convert(const YAML::Node& n, const std::string& key, const char* expected) const {
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
  // Throws for keys outside `allowed`.
  void only(const std::vector<std::string>& allowed) const {
    for (const auto& kv : node_) {
      const auto key = kv.first.as<std::string>();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        throw InputError(fmt::format("{}: unknown key '{}' in {} (expected one of: {})",
                                     where(kv.first), key, path_.empty() ? "the deck" : path_,
                                     fmt::join(allowed, ", ")));
    }
  }
  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }

 private:
  YAML::Node node_;
  std::string path_;
  std::string file_;
};

Section section(const YAML::Node& root, const std::string& key, const std::string& file,
                bool required) {
  const YAML::Node n = root[key];
  if (!n) {
    if (required)
      throw InputError(fmt::format("{}: missing required section '{}'", file, key));
    return Section(YAML::Node(YAML::NodeType::Map), key, file);
  }
  if (!n.IsMap()) {
    const auto mark = n.Mark();
    throw InputError(fmt::format("{}:{}:{}: {}: expected a map of settings", file, mark.line + 1,
                                 mark.column + 1, key));
  }
  Section s(n, key, file);
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
      model.input.dims.push_back(v);
    }
  } else {
    const auto features = s.convert<std::int64_t>(input, "input", expected.c_str());
    positive(features > 0, s, "input", features);
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
  model.loss.type = s.get<std::string>("loss", model.loss.type, "softmax_cross_entropy, mse, mae or huber");
  const auto& l = model.loss.type;
  if (l != "softmax_cross_entropy" && l != "mse" && l != "mae" && l != "huber")
    throw InputError(fmt::format("{}: model.loss: unknown loss '{}' (expected "
                                 "softmax_cross_entropy, mse, mae or huber)",
                                 s.where(s.raw("loss")), l));
  model.loss.huber_delta = s.get<double>("huber_delta", 1.0, "a positive number");
  if (!(model.loss.huber_delta > 0))
    throw InputError(fmt::format("{}: model.huber_delta: expected a positive number, got {}",
                                 s.where(s.raw("huber_delta")), model.loss.huber_delta));
  if (s.has("huber_delta") && l != "huber")
    throw InputError(fmt::format("{}: model.huber_delta: only the huber loss has a delta (model.loss "
                                 "is {})",
                                 s.where(s.raw("huber_delta")), l));
  model_shapes(model);  // validates every layer's input shape
  return model;
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
    sec[key.substr(dot + 1)] = parsed;
  }
  return parsed;
}

}  // namespace

const std::vector<std::string>& settable_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& [sec, names] : schema())
      for (const auto& name : names) {
        if (sec.empty() && name != "seed" && name != "precision") continue;
        if (sec == "model" && name != "loss" && name != "huber_delta") continue;
        out.push_back(sec.empty() ? name : sec + "." + name);
      }
    return out;
  }();
  return keys;
}

Deck parse_deck(const std::string& text, const std::string& name,
                const std::vector<std::string>& overrides) {
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
  overridden_nodes.clear();
  for (const auto& o : overrides) overridden_nodes.push_back(apply_override(root, o));
  Section top(root, "", name);
  top.only(schema().at(""));

  Deck deck;
  deck.path = name;
  deck.seed = top.get<std::uint64_t>("seed", 0, "a non-negative integer");
  deck.precision = top.get<std::string>("precision", "float", "float or double");
  if (deck.precision != "float" && deck.precision != "double")
    throw InputError(fmt::format("{}: precision: expected float or double, got '{}'",
                                 top.where(top.raw("precision")), deck.precision));

  deck.model = read_model(section(root, "model", name, true));

  const Section d = section(root, "data", name, true);
  deck.data.format = d.get<std::string>("format", "idx", "idx or hdf5");
  if (deck.data.format == "idx") {
    deck.data.train_images = d.need<std::string>("train_images", "a file path");
    deck.data.train_labels = d.need<std::string>("train_labels", "a file path");
    deck.data.test_images = d.need<std::string>("test_images", "a file path");
    deck.data.test_labels = d.need<std::string>("test_labels", "a file path");
  } else if (deck.data.format == "hdf5") {
    deck.data.train_file = d.need<std::string>("train_file", "an HDF5 file path");
    deck.data.test_file = d.need<std::string>("test_file", "an HDF5 file path");
    deck.data.inputs_dataset = d.get<std::string>("inputs_dataset", "inputs", "a dataset name");
    deck.data.labels_dataset = d.get<std::string>("labels_dataset", "labels", "a dataset name");
    deck.data.targets_dataset = d.get<std::string>("targets_dataset", "targets", "a dataset name");
  } else {
    throw InputError(fmt::format("{}: data.format: unknown format '{}' (expected idx or hdf5)",
                                 d.where(d.raw("format")), deck.data.format));
  }
  deck.data.normalize = d.get<std::string>("normalize", "standardize", "none, scale or standardize");
  if (deck.data.normalize != "none" && deck.data.normalize != "scale" &&
      deck.data.normalize != "standardize")
    throw InputError(fmt::format("{}: data.normalize: unknown mode '{}' (expected none, scale or "
                                 "standardize)",
                                 d.where(d.raw("normalize")), deck.data.normalize));
  deck.data.regression = deck.model.loss.regression();
  deck.data.normalize_targets = d.get<std::string>("normalize_targets", "none", "none or standardize");
  if (deck.data.normalize_targets != "none" && deck.data.normalize_targets != "standardize")
    throw InputError(fmt::format("{}: data.normalize_targets: unknown mode '{}' (expected none or "
                                 "standardize)",
                                 d.where(d.raw("normalize_targets")), deck.data.normalize_targets));
  if (d.has("normalize_targets") && !deck.data.regression)
    throw InputError(fmt::format("{}: data.normalize_targets: only regression losses read float "
                                 "targets (model.loss is {})",
                                 d.where(d.raw("normalize_targets")), deck.model.loss.type));
  deck.data.train_limit = d.get<std::int64_t>("train_limit", 0, "a non-negative integer");
  deck.data.test_limit = d.get<std::int64_t>("test_limit", 0, "a non-negative integer");

  const Section t = section(root, "training", name, true);
  deck.training.epochs = t.need<std::int64_t>("epochs", "a positive integer");
  positive(deck.training.epochs > 0, t, "epochs", deck.training.epochs);
  deck.training.batch_size = t.need<std::int64_t>("batch_size", "a positive integer");
  positive(deck.training.batch_size > 0, t, "batch_size", deck.training.batch_size);
  deck.training.micro_batches = t.get<int>("micro_batches", 1, "a positive integer");
  positive(deck.training.micro_batches > 0, t, "micro_batches", deck.training.micro_batches);
  if (deck.training.micro_batches > deck.training.batch_size)
    throw InputError(fmt::format("{}: training.micro_batches: {} micro-batches cannot split a "
                                 "batch of {} samples",
                                 t.where(t.raw("micro_batches")), deck.training.micro_batches,
                                 deck.training.batch_size));
  deck.training.shuffle = t.get<bool>("shuffle", true, "true or false");
  deck.training.progress_every = t.get<std::int64_t>("progress_every", 50, "a non-negative integer");

  const Section o = section(root, "optimizer", name, false);
  OptimizerSpec& opt = deck.optimizer;
  opt.type = o.get<std::string>("type", opt.type, "sgd, adam or adamw");
  opt.lr = o.get<double>("lr", opt.lr, "a positive number");
  opt.momentum = o.get<double>("momentum", opt.momentum, "a number in [0, 1)");
  opt.beta1 = o.get<double>("beta1", opt.beta1, "a number in [0, 1)");
  opt.beta2 = o.get<double>("beta2", opt.beta2, "a number in [0, 1)");
  opt.eps = o.get<double>("eps", opt.eps, "a positive number");
  opt.weight_decay = o.get<double>("weight_decay", opt.weight_decay, "a number >= 0");
  opt.schedule = o.get<std::string>("schedule", opt.schedule, "constant or cosine");
  make_optimizer<double>(opt, 0);  // validates the hyper-parameters

  const Section p = section(root, "pipeline", name, false);
  if (p.has("balance")) {
    const YAML::Node b = p.raw("balance");
    if (b.IsSequence()) {
      deck.pipeline.balance = "explicit";
      for (const auto& c : b) {
        try {
          deck.pipeline.counts.push_back(c.as<int>());
        } catch (const YAML::Exception&) {
          throw InputError(fmt::format("{}: pipeline.balance: expected a list of layer counts, "
                                       "got '{}'",
                                       p.where(c), c.Scalar()));
        }
      }
    } else {
      deck.pipeline.balance = p.convert<std::string>(b, "balance", "params, flops, time or a list");
      if (deck.pipeline.balance != "params" && deck.pipeline.balance != "flops" &&
          deck.pipeline.balance != "time")
        throw InputError(fmt::format("{}: pipeline.balance: unknown mode '{}' (expected params, "
                                     "flops, time, or a list of layer counts per cell)",
                                     p.where(b), deck.pipeline.balance));
    }
  }
  deck.pipeline.remat =
      parse_remat(p.get<std::string>("remat", "never", "never, always or except_last"),
                  p.has("remat") ? p.where(p.raw("remat")) + ": pipeline.remat" : "pipeline.remat");
  deck.pipeline.schedule = parse_schedule(
      p.get<std::string>("schedule", "fill_drain", "fill_drain or 1f1b"),
      p.has("schedule") ? p.where(p.raw("schedule")) + ": pipeline.schedule" : "pipeline.schedule");

  const Section par = section(root, "parallel", name, false);
  deck.parallel.cells = par.get<int>("cells", 0, "a non-negative integer (0 = all ranks)");
  if (deck.parallel.cells < 0)
    throw InputError(fmt::format("{}: parallel.cells: expected a non-negative integer (0 = all "
                                 "ranks), got {}",
                                 par.where(par.raw("cells")), deck.parallel.cells));
  deck.parallel.placement = par.get<std::string>("placement", "replica", "replica or pipeline");
  if (deck.parallel.placement != "replica" && deck.parallel.placement != "pipeline")
    throw InputError(fmt::format("{}: parallel.placement: unknown placement '{}' (expected "
                                 "replica or pipeline)",
                                 par.where(par.raw("placement")), deck.parallel.placement));
  deck.parallel.deterministic_reduction =
      par.get<bool>("deterministic_reduction", false, "true or false");
  deck.parallel.bucket_kib = par.get<std::int64_t>("bucket_kib", 256, "a positive integer");
  positive(deck.parallel.bucket_kib > 0, par, "bucket_kib", deck.parallel.bucket_kib);

  const Section c = section(root, "checkpoint", name, false);
  deck.checkpoint.directory = c.get<std::string>("directory", "", "a directory path");
  deck.checkpoint.every_steps = c.get<std::int64_t>("every_steps", 0, "a non-negative integer");
  deck.checkpoint.every_epochs = c.get<std::int64_t>("every_epochs", 1, "a non-negative integer");
  deck.checkpoint.keep = c.get<int>("keep", 2, "a positive integer");
  positive(deck.checkpoint.keep > 0, c, "keep", deck.checkpoint.keep);
  if (deck.checkpoint.every_steps < 0 || deck.checkpoint.every_epochs < 0)
    throw InputError(fmt::format("{}: checkpoint.every_steps and checkpoint.every_epochs must be >= 0",
                                 c.where(c.node())));

  const Section tr = section(root, "trace", name, false);
  deck.trace.file = tr.get<std::string>("file", "", "a file path");
  deck.trace.every = tr.get<std::int64_t>("every", 10, "a positive integer");
  positive(deck.trace.every > 0, tr, "every", deck.trace.every);

  YAML::Emitter out;
  out << root;
  deck.text = out.c_str();
  return deck;
}

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open input deck (missing or unreadable)", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_deck(text.str(), path, overrides);
}

}  // namespace gpipe

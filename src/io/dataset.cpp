#include "gpipe/io/dataset.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "gpipe/core/error.hpp"
#include "gpipe/core/rng.hpp"
#include "gpipe/io/idx.hpp"

namespace gpipe {

Dataset load_idx_dataset(const std::string& images, const std::string& labels, std::int64_t limit,
                         Normalization& norm, bool fit, bool with_inputs) {
  const IdxArray y = read_idx(labels);
  if (!with_inputs) {
    if (y.dims.size() != 1)
      throw InputError(fmt::format("{}: expected a label file with 1 dimension (N), found {}",
                                   labels, y.dims.size()));
    Dataset d;
    d.name = images;
    d.labels_name = labels;
    d.samples = limit > 0 ? std::min(limit, y.dims[0]) : y.dims[0];
    d.labels.assign(y.data.begin(), y.data.begin() + d.samples);
    return d;
  }
  const IdxArray x = read_idx(images);
  if (x.dims.size() < 2)
    throw InputError(fmt::format("{}: expected an image file with at least 2 dimensions (N, ...), "
                                 "found {}",
                                 images, x.dims.size()));
  if (y.dims.size() != 1)
    throw InputError(fmt::format("{}: expected a label file with 1 dimension (N), found {}", labels,
                                 y.dims.size()));
  if (x.dims[0] != y.dims[0])
    throw InputError(fmt::format("{} has {} images but {} has {} labels", images, x.dims[0], labels,
                                 y.dims[0]));
  Dataset d;
  d.name = images;
  d.labels_name = labels;
  d.samples = limit > 0 ? std::min(limit, x.dims[0]) : x.dims[0];
  d.features = std::accumulate(x.dims.begin() + 1, x.dims.end(), std::int64_t(1),
                               std::multiplies<std::int64_t>());
  const std::int64_t count = d.samples * d.features;
  d.inputs.resize(size_t(count));
  for (std::int64_t i = 0; i < count; ++i) d.inputs[size_t(i)] = float(x.data[size_t(i)]) / 255.0f;
  d.labels.assign(y.data.begin(), y.data.begin() + d.samples);

  if (norm.mode == "none") {
    for (std::int64_t i = 0; i < count; ++i) d.inputs[size_t(i)] = float(x.data[size_t(i)]);
  } else if (norm.mode == "standardize") {
    standardize(d, norm, fit);
  } else if (norm.mode == "standardize_per_feature") {
    standardize_features(d, norm, fit);
  } else if (norm.mode != "scale") {
    throw InputError(fmt::format("data.normalize: unknown mode '{}' (expected none, scale, "
                                 "standardize or standardize_per_feature)",
                                 norm.mode));
  }
  return d;
}

void standardize(Dataset& data, Normalization& norm, bool fit) {
  if (fit) {
    // Two passes in double (mean, then the mean squared deviation from it):
    // never E[x^2] - E[x]^2, which cancels catastrophically when |mean| >> std
    // and overflows float at |x| > 1e19. Inputs are finite floats (the
    // readers reject others), so nothing here overflows.
    const auto count = std::max<std::size_t>(data.inputs.size(), 1);
    double sum = 0;
    for (float v : data.inputs) sum += v;
    const double mean = sum / double(count);
    double sq = 0;
    for (float v : data.inputs) sq += (double(v) - mean) * (double(v) - mean);
    const double var = sq / double(count);
    norm.mean = mean;
    // Constant inputs: nothing to scale; they all become 0.
    norm.stddev = var > 0 ? std::sqrt(var) : 1.0;
  }
  const double mean = norm.mean, stddev = norm.stddev;
  for (auto& v : data.inputs) v = float((double(v) - mean) / stddev);
}

void standardize_features(Dataset& data, Normalization& norm, bool fit) {
  const std::int64_t f = data.features, n = data.samples;
  if (fit) {  // two passes in double per feature, as standardize()
    norm.feature_mean.assign(size_t(f), 0.0);
    norm.feature_std.assign(size_t(f), 1.0);
    const double count = double(std::max<std::int64_t>(n, 1));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < f; ++j) norm.feature_mean[size_t(j)] += data.inputs[size_t(i * f + j)];
    for (auto& m : norm.feature_mean) m /= count;
    std::vector<double> sq(size_t(f), 0.0);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < f; ++j) {
        const double d = double(data.inputs[size_t(i * f + j)]) - norm.feature_mean[size_t(j)];
        sq[size_t(j)] += d * d;
      }
    for (std::int64_t j = 0; j < f; ++j)  // a constant feature: nothing to scale, it becomes 0
      norm.feature_std[size_t(j)] = sq[size_t(j)] > 0 ? std::sqrt(sq[size_t(j)] / count) : 1.0;
  }
  require(std::int64_t(norm.feature_mean.size()) == f && std::int64_t(norm.feature_std.size()) == f,
          fmt::format("{}: {} features per sample, but the per-feature normalization has {}", data.name,
                      f, norm.feature_mean.size()));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < f; ++j) {
      float& v = data.inputs[size_t(i * f + j)];
      v = float((double(v) - norm.feature_mean[size_t(j)]) / norm.feature_std[size_t(j)]);
    }
}

void check_finite(const Dataset& data) {
  for (std::size_t i = 0; i < data.inputs.size(); ++i)
    if (!std::isfinite(data.inputs[i])) {
      const auto f = std::size_t(std::max<std::int64_t>(data.features, 1));
      throw InputError(fmt::format("{}: sample {}, feature {} is {} (inputs must be finite float values)",
                                   data.name, i / f, i % f, double(data.inputs[i])));
    }
  for (std::size_t i = 0; i < data.targets.size(); ++i)
    if (!std::isfinite(data.targets[i])) {
      const auto p = std::size_t(std::max<std::int64_t>(data.outputs, 1));
      throw InputError(fmt::format("{}: sample {}, output {} is {} (targets must be finite float values)",
                                   data.labels_name, i / p, i % p, double(data.targets[i])));
    }
}

void standardize_targets(Dataset& data, NormalizationStats& stats, bool fit) {
  const std::int64_t p = data.outputs, n = data.samples;
  if (p == 0) return;
  if (fit) {
    stats.target_mean.assign(size_t(p), 0.0);
    stats.target_std.assign(size_t(p), 1.0);
    for (std::int64_t j = 0; j < p; ++j) {
      double sum = 0, sq = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double v = data.targets[size_t(i * p + j)];
        sum += v;
        sq += v * v;
      }
      const double mean = sum / double(std::max<std::int64_t>(n, 1));
      const double var = sq / double(std::max<std::int64_t>(n, 1)) - mean * mean;
      stats.target_mean[size_t(j)] = mean;
      stats.target_std[size_t(j)] = var > 1e-24 ? std::sqrt(var) : 1.0;
    }
  }
  require(std::int64_t(stats.target_mean.size()) == p,
          fmt::format("{}: {} outputs per sample, but the normalization has {}", data.labels_name, p,
                      stats.target_mean.size()));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < p; ++j) {
      float& v = data.targets[size_t(i * p + j)];
      v = float((double(v) - stats.target_mean[size_t(j)]) / stats.target_std[size_t(j)]);
    }
}

std::pair<Dataset, Dataset> load_train_test(const DataSpec& spec, bool with_inputs,
                                            NormalizationStats* stats) {
  Normalization norm;
  norm.mode = spec.normalize;
  NormalizationStats fitted;
  auto record_inputs = [&] {
    if (!stats || !with_inputs) return;
    stats->input_scale = spec.format == "idx" && norm.mode != "none" ? 1.0 / 255.0 : 1.0;
    stats->input_mean = norm.mode == "standardize" ? norm.mean : 0.0;
    stats->input_std = norm.mode == "standardize" ? norm.stddev : 1.0;
    stats->input_feature_mean = norm.feature_mean;
    stats->input_feature_std = norm.feature_std;
  };
  if (spec.format == "idx" && spec.regression)
    throw InputError("model.loss: a regression loss needs float targets, which only data.format: "
                     "hdf5 provides (data.targets_dataset)");
  if (spec.format == "idx") {
    Dataset train = load_idx_dataset(spec.train_images, spec.train_labels, spec.train_limit, norm,
                                     true, with_inputs);
    Dataset test = load_idx_dataset(spec.test_images, spec.test_labels, spec.test_limit, norm,
                                    false, with_inputs);
    record_inputs();
    return {std::move(train), std::move(test)};
  }
  if (spec.format == "tokens") {  // ids, never normalized (the deck refuses data.normalize)
    Dataset train = load_hdf5_tokens(spec.train_file, spec.tokens_dataset, spec.sequence_length,
                                     spec.train_limit, with_inputs);
    Dataset test = load_hdf5_tokens(spec.test_file, spec.tokens_dataset, spec.sequence_length,
                                    spec.test_limit, with_inputs);
    if (!train.vocabulary.empty() && !test.vocabulary.empty() && train.vocabulary != test.vocabulary)
      throw InputError(fmt::format("{} and {} have different vocabularies ({} and {} ids, or other "
                                   "characters): write both with one make_text_data.py run",
                                   spec.train_file, spec.test_file, train.vocabulary.size(),
                                   test.vocabulary.size()));
    if (stats) *stats = NormalizationStats{};
    return {std::move(train), std::move(test)};
  }
  if (norm.mode == "scale")
    throw InputError("data.normalize: 'scale' (x/255) is for IDX images; use none, standardize or "
                     "standardize_per_feature for HDF5 data");
  auto load = [&](const std::string& file, std::int64_t limit) {
    return spec.regression
               ? load_hdf5_regression(file, spec.inputs_dataset, spec.targets_dataset, limit, with_inputs)
               : load_hdf5_dataset(file, spec.inputs_dataset, spec.labels_dataset, limit, with_inputs);
  };
  Dataset train = load(spec.train_file, spec.train_limit);
  Dataset test = load(spec.test_file, spec.test_limit);
  if (with_inputs && train.features != test.features)
    throw InputError(fmt::format("{} has {} features per sample but {} has {}", spec.train_file,
                                 train.features, spec.test_file, test.features));
  if (train.outputs != test.outputs)
    throw InputError(fmt::format("{} has {} targets per sample but {} has {}", train.labels_name,
                                 train.outputs, test.labels_name, test.outputs));
  if (with_inputs && norm.mode == "standardize") {
    standardize(train, norm, true);
    standardize(test, norm, false);
  }
  if (with_inputs && norm.mode == "standardize_per_feature") {
    standardize_features(train, norm, true);
    standardize_features(test, norm, false);
  }
  record_inputs();
  if (spec.regression && spec.normalize_targets == "standardize") {
    standardize_targets(train, fitted, true);
    standardize_targets(test, fitted, false);
    if (stats) {
      stats->target_mean = fitted.target_mean;
      stats->target_std = fitted.target_std;
    }
  }
  return {std::move(train), std::move(test)};
}

void check_labels(const Dataset& data, std::int64_t classes) {
  const auto per = size_t(std::max<std::int64_t>(data.labels_per_sample, 1));
  for (size_t i = 0; i < data.labels.size(); ++i)
    if (data.labels[i] < 0 || data.labels[i] >= classes) {
      if (per > 1)
        throw InputError(fmt::format("{}: token id {} (sample {}, token {}) is outside [0, {}) (the "
                                     "model's vocabulary: its last layer has {} logits per token)",
                                     data.labels_name, data.labels[i], i / per, i % per, classes, classes));
      throw InputError(fmt::format("{}: label {} of sample {} is outside [0, {}) (the model's last "
                                   "layer has {} outputs)",
                                   data.labels_name, data.labels[i], i, classes, classes));
    }
}

std::vector<std::int64_t> epoch_order(std::int64_t samples, std::uint64_t seed, std::int64_t epoch,
                                      bool shuffle) {
  std::vector<std::int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), std::int64_t(0));
  if (!shuffle) return order;
  for (std::int64_t i = samples - 1; i > 0; --i) {
    const auto h = rng::hash(seed, rng::kShuffle, std::uint64_t(epoch), std::uint64_t(i));
    const auto j = std::int64_t(h % std::uint64_t(i + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

}  // namespace gpipe

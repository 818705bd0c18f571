#pragma once
// Labelled classification data in host memory, and its order per epoch.

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

/// samples x features inputs (row-major, float) and one label per sample.
struct Dataset {
  std::string name;             ///< inputs file, for messages
  std::string labels_name;      ///< labels file, for messages
  std::int64_t samples = 0;
  std::int64_t features = 0;
  std::vector<float> inputs;    ///< (samples, features), row-major
  std::vector<std::int32_t> labels;  ///< (samples)
};

/// Per-feature-independent input normalization.
struct Normalization {
  std::string mode = "standardize";  ///< none | scale (x/255) | standardize ((x/255 - mean)/std)
  double mean = 0;  ///< standardize: statistics of the training images (after /255)
  double stddev = 1;
};

/// Loads an IDX image file (N, rows, cols) and an IDX label file (N),
/// keeping the first `limit` samples (0 = all). Images become float
/// features rows*cols long, normalized by `norm` (mean/stddev are computed
/// from these images and stored into `norm` when `fit` is true).
/// Throws InputError naming the file on any mismatch (ranks, counts).
/// With with_inputs = false only the labels are read (cells other than the
/// first never see inputs); features is then 0.
Dataset load_idx_dataset(const std::string& images, const std::string& labels,
                         std::int64_t limit, Normalization& norm, bool fit,
                         bool with_inputs = true);

/// Throws InputError if a label lies outside [0, classes), naming the file,
/// the sample index and the value.
void check_labels(const Dataset& data, std::int64_t classes);

/// Order of the samples in `epoch`: identity if !shuffle, else a Fisher-Yates
/// permutation driven by the counter-based hash of (seed, epoch, i), the same
/// on every rank and every platform.
std::vector<std::int64_t> epoch_order(std::int64_t samples, std::uint64_t seed,
                                      std::int64_t epoch, bool shuffle);

}  // namespace gpipe

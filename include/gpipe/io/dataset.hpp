#pragma once
// Labelled classification data in host memory, and its order per epoch.

#include <cstdint>
#include <string>
#include <utility>
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

/// The deck's `data` section.
struct DataSpec {
  std::string format = "idx";             ///< idx | hdf5
  std::string train_images, train_labels, test_images, test_labels;  ///< idx files
  std::string train_file, test_file;      ///< hdf5 files
  std::string inputs_dataset = "inputs";  ///< hdf5: (N, features) floating point
  std::string labels_dataset = "labels";  ///< hdf5: (N) integers
  std::string normalize = "standardize";  ///< none | scale (idx only) | standardize
  std::int64_t train_limit = 0;           ///< use only the first N training samples (0 = all)
  std::int64_t test_limit = 0;            ///< use only the first N test samples (0 = all)
};

/// Loads the training and test sets `spec` names, normalizing both with the
/// training set's statistics. With with_inputs = false only labels are read.
/// Throws InputError naming the file and the problem.
std::pair<Dataset, Dataset> load_train_test(const DataSpec& spec, bool with_inputs);

/// Reads samples from an HDF5 file: `inputs` (N, features), any floating-point
/// type, read as float; `labels` (N), any integer type, read as int32. Keeps
/// the first `limit` samples (0 = all). Throws InputError naming the file and
/// dataset for a missing file or dataset, a wrong rank, a wrong type class,
/// or different sample counts.
Dataset load_hdf5_dataset(const std::string& file, const std::string& inputs,
                          const std::string& labels, std::int64_t limit, bool with_inputs = true);

/// Standardizes inputs in place: (x - mean) / stddev, all features pooled;
/// mean and stddev are computed from `data` and stored into `norm` if `fit`
/// (two passes in double, the population standard deviation; stddev = 1 when
/// all inputs are equal). Exact to float rounding for finite inputs of any
/// magnitude (1e-30 .. 3e38).
void standardize(Dataset& data, Normalization& norm, bool fit);

/// Throws InputError if an input is NaN or infinite, naming the file
/// (data.name), the 0-based sample and feature, and the value.
void check_finite(const Dataset& data);

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

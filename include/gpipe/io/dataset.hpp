#pragma once
// Labelled classification data in host memory, and its order per epoch.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpipe {

/// samples x features inputs (row-major, float) and, per sample, one class
/// label (classification) or `outputs` float targets (regression).
struct Dataset {
  std::string name;             ///< inputs file, for messages
  std::string labels_name;      ///< labels (or targets) file, for messages
  std::int64_t samples = 0;
  std::int64_t features = 0;
  std::vector<float> inputs;    ///< (samples, features), row-major
  std::vector<std::int32_t> labels;  ///< (samples); empty for regression data
  std::int64_t outputs = 0;          ///< regression: targets per sample (0: classification)
  std::vector<float> targets;        ///< (samples, outputs), row-major; empty for classification
  /// Labels per sample: 1 for classification; T for token data, where labels
  /// is (samples, T) row-major, the next token id of each input token.
  std::int64_t labels_per_sample = 1;
  /// Token data: the vocabulary, character (byte) of each id; empty otherwise.
  std::string vocabulary;
};

/// The normalization a trained model expects, stored in its checkpoints
/// (docs/file-formats.md) and applied by Pipeline::predict and gpipe-infer:
/// inputs x_j -> (x_j * input_scale - mean_j) / std_j with mean_j, std_j =
/// input_feature_mean[j], input_feature_std[j] when those are set
/// (data.normalize: standardize_per_feature), else input_mean, input_std for
/// every feature (pooled); targets y_j -> (y_j - target_mean[j]) / target_std[j] for
/// training, outputs de-normalized the inverse way. Defaults: identity.
struct NormalizationStats {
  double input_scale = 1, input_mean = 0, input_std = 1;
  /// Per input feature (size model.input_features); empty: pooled.
  std::vector<double> input_feature_mean, input_feature_std;
  std::vector<double> target_mean, target_std;  ///< per output; empty: identity
};

/// Input normalization.
struct Normalization {
  /// none | scale (x/255) | standardize ((x/255 - mean)/std, pooled) |
  /// standardize_per_feature ((x/255 - mean_j)/std_j)
  std::string mode = "standardize";
  double mean = 0;  ///< standardize: statistics of the training images (after /255)
  double stddev = 1;
  std::vector<double> feature_mean, feature_std;  ///< standardize_per_feature
};

/// The deck's `data` section.
struct DataSpec {
  std::string format = "idx";             ///< idx | hdf5 | tokens
  std::string train_images, train_labels, test_images, test_labels;  ///< idx files
  std::string train_file, test_file;      ///< hdf5 and tokens files
  std::string tokens_dataset = "tokens";  ///< tokens: (N) integer token ids, a text in order
  std::int64_t sequence_length = 0;       ///< tokens: T, the ids per sample (= model.input)
  std::string inputs_dataset = "inputs";  ///< hdf5: (N, features) floating point
  std::string labels_dataset = "labels";  ///< hdf5: (N) integers (classification)
  std::string targets_dataset = "targets";  ///< hdf5: (N, outputs) or (N) floating point (regression)
  bool regression = false;                ///< read targets_dataset, not labels (model.loss is a regression loss)
  std::string normalize_targets = "none";  ///< regression: none | standardize (per output)
  std::string normalize = "standardize";  ///< none | scale (idx only) | standardize
  std::int64_t train_limit = 0;           ///< use only the first N training samples (0 = all)
  std::int64_t test_limit = 0;            ///< use only the first N test samples (0 = all)
};

/// Loads the training and test sets `spec` names, normalizing both with the
/// training set's statistics (stored into `stats` if not null: the input
/// part only when with_inputs, the target part only for regression data).
/// With with_inputs = false only labels or targets are read.
/// Throws InputError naming the file and the problem.
std::pair<Dataset, Dataset> load_train_test(const DataSpec& spec, bool with_inputs,
                                            NormalizationStats* stats = nullptr);

/// Reads samples from an HDF5 file: `inputs` (N, features), any floating-point
/// type, read as float; `labels` (N), any integer type, read as int32. Keeps
/// the first `limit` samples (0 = all). Throws InputError naming the file and
/// dataset for a missing file or dataset, a wrong rank, a wrong type class,
/// or different sample counts.
Dataset load_hdf5_dataset(const std::string& file, const std::string& inputs,
                          const std::string& labels, std::int64_t limit, bool with_inputs = true);

/// Reads a token stream, the 1-D integer dataset `tokens` (N ids in text
/// order) of an HDF5 file, as non-overlapping sequences of T =
/// sequence_length ids: sample s has inputs ids[s*T .. s*T + T) (as float,
/// one id per column) and labels ids[s*T + 1 .. s*T + T] (the next id of each:
/// the inputs shifted by one), so samples = (N - 1) / T and every id is an
/// input once per epoch (a tail of fewer than T + 1 ids is dropped). Keeps
/// the first `limit` sequences (0 = all). Reads the dataset `vocabulary`
/// (V bytes, the character of each id) when present. Throws InputError
/// naming the file and dataset for a missing file or dataset, a rank other
/// than 1, a non-integer type, fewer than T + 1 ids, or an id outside
/// [0, V) (naming its position and value).
Dataset load_hdf5_tokens(const std::string& file, const std::string& tokens,
                         std::int64_t sequence_length, std::int64_t limit, bool with_inputs = true);

/// The vocabulary of a token file (its dataset `vocabulary`: V bytes, the
/// character of each id), e.g. for gpipe-infer --generate. Throws
/// InputError naming the file when it is missing, not HDF5, or has no
/// vocabulary.
std::string load_token_vocabulary(const std::string& file);

/// Reads regression samples from an HDF5 file: `inputs` (N, features) and
/// `targets` (N, outputs) or (N), any floating-point types, read as float;
/// keeps the first `limit` samples (0 = all). Throws InputError as
/// load_hdf5_dataset (integer targets: "must hold floating-point values").
Dataset load_hdf5_regression(const std::string& file, const std::string& inputs,
                             const std::string& targets, std::int64_t limit, bool with_inputs = true);

/// Reads only the inputs `inputs` (N, features), any floating-point type, of
/// an HDF5 file as float (inference). Throws InputError as load_hdf5_dataset.
Dataset load_hdf5_inputs(const std::string& file, const std::string& inputs);

/// Standardizes the targets of `data` per output in place, y_j -> (y_j -
/// mean_j) / std_j; mean and std come from `data` into `stats` if `fit`
/// (a constant output gets std 1), else from `stats`.
void standardize_targets(Dataset& data, NormalizationStats& stats, bool fit);

/// Standardizes inputs in place: (x - mean) / stddev, all features pooled;
/// mean and stddev are computed from `data` and stored into `norm` if `fit`
/// (two passes in double, the population standard deviation; stddev = 1 when
/// all inputs are equal). Exact to float rounding for finite inputs of any
/// magnitude (1e-30 .. 3e38).
void standardize(Dataset& data, Normalization& norm, bool fit);

/// Standardizes inputs per feature in place: x_j -> (x_j - mean_j) / std_j;
/// mean_j and std_j are computed from `data` into norm.feature_mean and
/// norm.feature_std if `fit` (two passes in double, population standard
/// deviation; std_j = 1 for a constant feature), else taken from them.
/// Throws InputError if `norm` has another number of features than `data`.
void standardize_features(Dataset& data, Normalization& norm, bool fit);

/// Throws InputError if an input or a regression target is NaN or infinite,
/// naming the file (data.name, or data.labels_name for targets), the 0-based
/// sample and feature (or output), and the value.
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

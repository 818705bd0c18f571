// Reading training data from HDF5 files (scientific users' own output).

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "gpipe/core/error.hpp"
#include "gpipe/io/dataset.hpp"
#include "hdf5_handle.hpp"

namespace gpipe {

namespace {
// Opens `name` in `file`, checks its rank (`rank`, or also 1 when
// `or_vector`) and type class; returns its dims. `key`: the deck key naming it.
std::vector<hsize_t> open_checked(hid_t file, const std::string& path, const std::string& name,
                                  int rank, H5T_class_t type_class, const char* what,
                                  h5::Handle& dataset, const char* key, bool or_vector = false) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    throw InputError(fmt::format("{}: no dataset '{}' (set data.{} in the deck)", path, name, key));
  dataset = h5::dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (!dataset.valid()) throw InputError(fmt::format("{}: '{}' is not a dataset", path, name));
  const h5::Handle space = h5::dataspace(H5Dget_space(dataset.get()));
  const int found = H5Sget_simple_extent_ndims(space.get());
  if (or_vector && found == 1) rank = 1;
  if (found != rank)
    throw InputError(fmt::format("{}: dataset '{}' has rank {}, expected {} {}", path, name, found,
                                 rank, what));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const h5::Handle type = h5::datatype(H5Dget_type(dataset.get()));
  if (H5Tget_class(type.get()) != type_class)
    throw InputError(fmt::format("{}: dataset '{}' must hold {} values{}", path, name,
                                 type_class == H5T_FLOAT ? "floating-point" : "integer",
                                 type_class == H5T_FLOAT ? ""
                                                         : " (float targets need a regression "
                                                           "loss: set model.loss to mse, mae or "
                                                           "huber)"));
  return dims;
}

// Validates a dataset's header (dims, element size) against the bytes the file
// actually stores for it, before anything is allocated: a damaged or hostile
// header cannot make the reader allocate more than the file backs. Contiguous
// and unfiltered chunked data must store every byte the dims promise;
// compressed data must have every chunk written and at most deflate's
// 1032:1 ratio over its stored bytes.
void check_storage(hid_t dataset, const std::string& path, const std::string& name,
                   const std::vector<hsize_t>& dims) {
  const h5::Handle type = h5::datatype(H5Dget_type(dataset));
  const std::uint64_t element = H5Tget_size(type.get());
  constexpr std::uint64_t kLimit = std::uint64_t(1) << 62;
  std::uint64_t promised = element;  // bytes the dims promise
  std::string shape;
  for (const auto d : dims) {
    shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    if (d != 0 && promised > kLimit / d) {
      promised = kLimit;
    } else {
      promised *= d;
    }
  }
  std::error_code ec;
  const auto file_bytes = std::uint64_t(std::filesystem::file_size(path, ec));
  const std::uint64_t stored = H5Dget_storage_size(dataset);
  const h5::Handle dcpl = h5::plist(H5Dget_create_plist(dataset));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  const int filters = layout == H5D_CHUNKED ? H5Pget_nfilters(dcpl.get()) : 0;
  const auto fail = [&](const std::string& why) {
    throw InputError(fmt::format("{}: dataset '{}': its header declares {} values of {} bytes "
                                 "({} bytes), {} (the file holds {} bytes): damaged or truncated "
                                 "file",
                                 path, name, shape, element,
                                 promised == kLimit ? std::string("more than 2^62")
                                                    : std::to_string(promised),
                                 why, file_bytes));
  };
  if (promised == kLimit) fail("more than any file can hold");
  if (filters <= 0) {
    if (stored < promised)
      fail(fmt::format("but only {} bytes are stored (expected {})", stored, promised));
    return;
  }
  // Compressed: every chunk must be written, and the ratio bounded.
  std::vector<hsize_t> chunk(dims.size(), 1);
  H5Pget_chunk(dcpl.get(), int(chunk.size()), chunk.data());
  std::uint64_t expected_chunks = 1;
  for (std::size_t i = 0; i < dims.size(); ++i)
    expected_chunks *= (dims[i] + chunk[i] - 1) / std::max<hsize_t>(chunk[i], 1);
  hsize_t chunks = 0;
  const h5::Handle space = h5::dataspace(H5Dget_space(dataset));
  H5Dget_num_chunks(dataset, space.get(), &chunks);
  if (chunks != expected_chunks)
    fail(fmt::format("but {} of its {} chunks are stored", chunks, expected_chunks));
  constexpr std::uint64_t kMaxRatio = 1032;  // deflate's largest compression ratio
  if (promised / kMaxRatio > stored)
    fail(fmt::format("more than {} times the {} compressed bytes stored", kMaxRatio, stored));
}

// Reads the leading `rows` rows of a dataset as `memory_type`.
void read_rows(hid_t dataset, hid_t memory_type, const std::vector<hsize_t>& dims, hsize_t rows,
               void* out, const std::string& path, const std::string& name) {
  const h5::Handle file_space = h5::dataspace(H5Dget_space(dataset));
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  count[0] = rows;
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  const h5::Handle memory_space = h5::dataspace(H5Screate_simple(int(count.size()), count.data(), nullptr));
  if (H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out) < 0)
    throw InputError(h5::with_reason(fmt::format("{}: reading dataset '{}' failed", path, name)));
}
// Opens `inputs` (samples, features) and checks its sample count against
// that of the `other` dataset (labels or targets); returns its dims.
std::vector<hsize_t> open_inputs(hid_t file, const std::string& path, const std::string& inputs,
                                 const std::string& other, hsize_t samples, h5::Handle& x) {
  auto xdims = open_checked(file, path, inputs, 2, H5T_FLOAT, "(samples, features)", x,
                            "inputs_dataset");
  if (xdims[0] != samples)
    throw InputError(fmt::format("{}: '{}' has {} samples but '{}' has {}", path, inputs, xdims[0],
                                 other, samples));
  return xdims;
}

// Reads the first d.samples rows of the inputs into d.features and d.inputs.
void read_inputs(const h5::Handle& x, const std::vector<hsize_t>& xdims, Dataset& d,
                 const std::string& path, const std::string& inputs) {
  d.features = std::int64_t(xdims[1]);
  d.inputs.resize(size_t(d.samples * d.features));
  read_rows(x.get(), H5T_NATIVE_FLOAT, xdims, hsize_t(d.samples), d.inputs.data(), path, inputs);
  check_finite(d);  // also catches float64 values beyond float's range (read as inf)
}

// Opens `path` for reading, with clear errors for a missing or non-HDF5 file.
h5::Handle open_data_file(const std::string& path) {
  h5::silence_errors();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(fmt::format("{}: HDF5 data file not found", path));
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) throw InputError(h5::with_reason(fmt::format("{}: cannot open HDF5 file", path)));
  if (is_hdf5 == 0) throw InputError(fmt::format("{}: not an HDF5 file", path));
  h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw InputError(h5::with_reason(fmt::format("{}: cannot open HDF5 file", path)));
  return file;
}
}  // namespace

Dataset load_hdf5_regression(const std::string& path, const std::string& inputs,
                             const std::string& targets, std::int64_t limit, bool with_inputs) {
  const h5::Handle file = open_data_file(path);
  Dataset d;
  d.name = path + ":" + inputs;
  d.labels_name = path + ":" + targets;
  h5::Handle y;
  const auto ydims = open_checked(file.get(), path, targets, 2, H5T_FLOAT, "(samples, outputs)", y,
                                  "targets_dataset", true);
  h5::Handle x;
  std::vector<hsize_t> xdims;
  if (with_inputs) xdims = open_inputs(file.get(), path, inputs, targets, ydims[0], x);
  if (ydims[0] == 0) throw InputError(fmt::format("{}: dataset '{}' is empty", path, targets));
  check_storage(y.get(), path, targets, ydims);
  if (with_inputs) check_storage(x.get(), path, inputs, xdims);
  d.samples = limit > 0 ? std::min(limit, std::int64_t(ydims[0])) : std::int64_t(ydims[0]);
  d.outputs = ydims.size() == 2 ? std::int64_t(ydims[1]) : 1;
  if (d.outputs == 0) throw InputError(fmt::format("{}: dataset '{}' has 0 outputs", path, targets));
  d.targets.resize(size_t(d.samples * d.outputs));
  read_rows(y.get(), H5T_NATIVE_FLOAT, ydims, hsize_t(d.samples), d.targets.data(), path, targets);
  check_finite(d);
  if (with_inputs) read_inputs(x, xdims, d, path, inputs);
  return d;
}

Dataset load_hdf5_tokens(const std::string& path, const std::string& tokens,
                         std::int64_t sequence_length, std::int64_t limit, bool with_inputs) {
  const h5::Handle file = open_data_file(path);
  const std::int64_t T = sequence_length;
  require(T >= 1, fmt::format("{}: data.sequence_length = {}, expected a positive integer", path, T));
  Dataset d;
  d.name = d.labels_name = path + ":" + tokens;
  h5::Handle ids;
  const auto dims = open_checked(file.get(), path, tokens, 1, H5T_INTEGER, "(tokens)", ids, "tokens_dataset");
  const auto count = std::int64_t(dims[0]);
  if (count < T + 1)
    throw InputError(fmt::format("{}: dataset '{}' holds {} token ids, fewer than one sequence of "
                                 "data.sequence_length + 1 = {}",
                                 path, tokens, count, T + 1));
  check_storage(ids.get(), path, tokens, dims);
  const std::int64_t sequences = (count - 1) / T;
  d.samples = limit > 0 ? std::min(limit, sequences) : sequences;
  const std::int64_t used = d.samples * T + 1;  // the ids the kept sequences read
  std::vector<std::int32_t> stream(static_cast<size_t>(used));
  read_rows(ids.get(), H5T_NATIVE_INT32, dims, hsize_t(used), stream.data(), path, tokens);
  std::int64_t vocabulary = std::int64_t(1) << 24;  // ids are exact as float below 2^24
  if (H5Lexists(file.get(), "vocabulary", H5P_DEFAULT) > 0) {
    h5::Handle v;
    const auto vdims = open_checked(file.get(), path, "vocabulary", 1, H5T_INTEGER, "(V)", v, "tokens_dataset");
    check_storage(v.get(), path, "vocabulary", vdims);
    std::string chars(size_t(vdims[0]), '\0');
    if (!chars.empty()) read_rows(v.get(), H5T_NATIVE_UCHAR, vdims, vdims[0], chars.data(), path, "vocabulary");
    d.vocabulary = chars;
    vocabulary = std::int64_t(vdims[0]);
  }
  for (std::int64_t i = 0; i < used; ++i)
    if (stream[size_t(i)] < 0 || stream[size_t(i)] >= vocabulary)
      throw InputError(fmt::format("{}: dataset '{}': token {} has id {}, outside [0, {}){}", path, tokens, i,
                                   stream[size_t(i)], vocabulary,
                                   d.vocabulary.empty() ? "" : " (the file's vocabulary)"));
  d.labels_per_sample = T;
  d.labels.resize(size_t(d.samples * T));
  for (std::int64_t s = 0; s < d.samples; ++s)
    for (std::int64_t t = 0; t < T; ++t) d.labels[size_t(s * T + t)] = stream[size_t(s * T + t + 1)];
  if (with_inputs) {
    d.features = T;
    d.inputs.resize(size_t(d.samples * T));
    for (std::int64_t k = 0; k < d.samples * T; ++k) d.inputs[size_t(k)] = float(stream[size_t(k)]);
  }
  return d;
}

std::string load_token_vocabulary(const std::string& path) {
  const h5::Handle file = open_data_file(path);
  if (H5Lexists(file.get(), "vocabulary", H5P_DEFAULT) <= 0)
    throw InputError(fmt::format("{}: no dataset 'vocabulary' (the characters of the token ids; "
                                 "scripts/make_text_data.py writes it)",
                                 path));
  h5::Handle v;
  const auto dims = open_checked(file.get(), path, "vocabulary", 1, H5T_INTEGER, "(V)", v, "tokens_dataset");
  check_storage(v.get(), path, "vocabulary", dims);
  std::string chars(size_t(dims[0]), '\0');
  if (!chars.empty()) read_rows(v.get(), H5T_NATIVE_UCHAR, dims, dims[0], chars.data(), path, "vocabulary");
  return chars;
}

Dataset load_hdf5_inputs(const std::string& path, const std::string& inputs) {
  const h5::Handle file = open_data_file(path);
  Dataset d;
  d.name = d.labels_name = path + ":" + inputs;
  h5::Handle x;
  const auto xdims = open_checked(file.get(), path, inputs, 2, H5T_FLOAT, "(samples, features)", x,
                                  "inputs_dataset");
  if (xdims[0] == 0) throw InputError(fmt::format("{}: dataset '{}' is empty", path, inputs));
  d.samples = std::int64_t(xdims[0]);
  check_storage(x.get(), path, inputs, xdims);
  read_inputs(x, xdims, d, path, inputs);
  return d;
}

Dataset load_hdf5_dataset(const std::string& path, const std::string& inputs,
                          const std::string& labels, std::int64_t limit, bool with_inputs) {
  const h5::Handle file = open_data_file(path);

  Dataset d;
  d.name = path + ":" + inputs;
  d.labels_name = path + ":" + labels;
  h5::Handle y;
  const auto ydims = open_checked(file.get(), path, labels, 1, H5T_INTEGER, "(samples)", y,
                                  "labels_dataset");
  std::int64_t samples = std::int64_t(ydims[0]);
  h5::Handle x;
  std::vector<hsize_t> xdims;
  if (with_inputs) xdims = open_inputs(file.get(), path, inputs, labels, ydims[0], x);
  if (samples == 0) throw InputError(fmt::format("{}: dataset '{}' is empty", path, labels));
  check_storage(y.get(), path, labels, ydims);
  if (with_inputs) check_storage(x.get(), path, inputs, xdims);
  d.samples = limit > 0 ? std::min(limit, samples) : samples;
  d.labels.resize(size_t(d.samples));
  read_rows(y.get(), H5T_NATIVE_INT32, ydims, hsize_t(d.samples), d.labels.data(), path, labels);
  if (with_inputs) read_inputs(x, xdims, d, path, inputs);
  return d;
}

}  // namespace gpipe

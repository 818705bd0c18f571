#include "gpipe/io/costs_file.hpp"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include <cstdio>

#include "gpipe/core/error.hpp"
#include "hdf5_handle.hpp"

namespace gpipe {
namespace {

constexpr const char* kFormat = "gpipe-layer-costs";

template <class V>
void write_column(hid_t file, const char* name, hid_t type, const std::vector<V>& values) {
  const hsize_t n = values.size();
  const h5::Handle space = h5::dataspace(H5Screate_simple(1, &n, nullptr));
  const h5::Handle d = h5::dataset(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!d.valid() || (n > 0 && H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0))
    throw InputError(fmt::format("cannot write dataset {}", name));
}

template <class V>
std::vector<V> read_column(hid_t file, const std::string& path, const char* name, hid_t type) {
  const h5::Handle d = h5::dataset(H5Dopen2(file, name, H5P_DEFAULT));
  if (!d.valid()) throw InputError(fmt::format("{}: no dataset /{} (not a layer cost file?)", path, name));
  const h5::Handle space = h5::dataspace(H5Dget_space(d.get()));
  hsize_t n = 0;
  if (H5Sget_simple_extent_ndims(space.get()) != 1 || H5Sget_simple_extent_dims(space.get(), &n, nullptr) < 0)
    throw InputError(fmt::format("{}: /{} is not a 1-D dataset", path, name));
  std::vector<V> values(static_cast<size_t>(n));
  if (n > 0 && H5Dread(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw InputError(fmt::format("{}: cannot read /{}", path, name));
  return values;
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : ",") + w;
  return s;
}

}  // namespace

void write_costs_file(const std::string& path, const CostsTable& t) {
  h5::silence_errors();
  const std::string tmp = path + ".tmp";
  try {
    const h5::Handle file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) throw InputError("cannot create the file");
    h5::write_attribute(file.get(), "format", std::string(kFormat));
    h5::write_attribute(file.get(), "format_version", 1LL);
    h5::write_attribute(file.get(), "deck", t.deck);
    h5::write_attribute(file.get(), "precision", t.precision);
    h5::write_attribute(file.get(), "build", t.build);
    h5::write_attribute(file.get(), "layer_types", join(t.layer_types));
    std::vector<std::int64_t> layer, rows;
    std::vector<double> f, bi, bw;
    for (const auto& r : t.rows) {
      layer.push_back(r.layer);
      rows.push_back(r.rows);
      f.push_back(r.forward_s);
      bi.push_back(r.backward_input_s);
      bw.push_back(r.backward_weights_s);
    }
    write_column(file.get(), "layer", H5T_NATIVE_INT64, layer);
    write_column(file.get(), "rows", H5T_NATIVE_INT64, rows);
    write_column(file.get(), "forward_s", H5T_NATIVE_DOUBLE, f);
    write_column(file.get(), "backward_input_s", H5T_NATIVE_DOUBLE, bi);
    write_column(file.get(), "backward_weights_s", H5T_NATIVE_DOUBLE, bw);
  } catch (const InputError& e) {
    std::remove(tmp.c_str());
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw InputError(fmt::format("{}: cannot rename {} into place", path, tmp));
}

CostsTable read_costs_file(const std::string& path) {
  h5::silence_errors();
  const h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw InputError(fmt::format("{}: cannot open (missing or not HDF5)", path));
  if (!h5::has_attribute(file.get(), "format") || h5::read_string_attribute(file.get(), "format") != kFormat)
    throw InputError(fmt::format("{}: not a layer cost file (attribute format != {})", path, kFormat));
  CostsTable t;
  t.deck = h5::read_string_attribute(file.get(), "deck");
  t.precision = h5::read_string_attribute(file.get(), "precision");
  t.build = h5::read_string_attribute(file.get(), "build");
  const std::string types = h5::read_string_attribute(file.get(), "layer_types");
  for (size_t at = 0; at < types.size();) {
    const size_t comma = types.find(',', at);
    t.layer_types.push_back(types.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    at = comma == std::string::npos ? types.size() : comma + 1;
  }
  const auto layer = read_column<std::int64_t>(file.get(), path, "layer", H5T_NATIVE_INT64);
  const auto rows = read_column<std::int64_t>(file.get(), path, "rows", H5T_NATIVE_INT64);
  const auto f = read_column<double>(file.get(), path, "forward_s", H5T_NATIVE_DOUBLE);
  const auto bi = read_column<double>(file.get(), path, "backward_input_s", H5T_NATIVE_DOUBLE);
  const auto bw = read_column<double>(file.get(), path, "backward_weights_s", H5T_NATIVE_DOUBLE);
  if (rows.size() != layer.size() || f.size() != layer.size() || bi.size() != layer.size() ||
      bw.size() != layer.size())
    throw InputError(fmt::format("{}: the datasets have different lengths", path));
  for (size_t i = 0; i < layer.size(); ++i) {
    // Measured times only: a NaN, infinite or negative entry (a corrupt or
    // hand-edited file) would make every prediction and tuned schedule from it
    // NaN or nonsense, reported as a figure.
    const auto where = [&] { return fmt::format("{}: row {} (layer {}, {} rows)", path, i, layer[i], rows[i]); };
    if (layer[i] < 0 || layer[i] >= std::int64_t(t.layer_types.size()))
      throw InputError(fmt::format("{}: layer {} outside 0..{} (layer_types lists {} layers)", where(), layer[i],
                                   std::int64_t(t.layer_types.size()) - 1, t.layer_types.size()));
    if (rows[i] < 1) throw InputError(fmt::format("{}: rows {}, expected at least 1", where(), rows[i]));
    for (const auto& [name, v] : {std::pair<const char*, double>{"forward_s", f[i]}, {"backward_input_s", bi[i]},
                                  {"backward_weights_s", bw[i]}})
      if (!std::isfinite(v) || v < 0)
        throw InputError(fmt::format("{}: {} = {} is not a measured time (expected a finite number of seconds >= 0)",
                                     where(), name, v));
    t.rows.push_back({layer[i], rows[i], f[i], bi[i], bw[i]});
  }
  return t;
}

}  // namespace gpipe

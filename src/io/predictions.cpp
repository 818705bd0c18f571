#include "gpipe/io/predictions.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "gpipe/core/error.hpp"
#include "hdf5_handle.hpp"

namespace gpipe {

namespace {
void write_dataset(hid_t file, const std::string& path, const std::string& name, hid_t file_type,
                   hid_t memory_type, std::vector<hsize_t> dims, const void* data) {
  const h5::Handle space = h5::dataspace(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
  const h5::Handle d = h5::dataset(
      H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!d.valid() || H5Dwrite(d.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw InputError(fmt::format("{}: writing dataset '{}' failed", path, name));
}
}  // namespace

template <class T>
void write_predictions(const std::string& path, const std::string& name, const std::vector<T>& values,
                       std::int64_t rows, std::int64_t cols, const PredictionInfo& info) {
  h5::silence_errors();
  require(std::int64_t(values.size()) == rows * cols,
          fmt::format("{}: {} values for {} x {} predictions", path, values.size(), rows, cols));
  const std::string tmp = path + ".tmp";
  {
    const h5::Handle file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) throw InputError(fmt::format("{}: cannot create the output file", tmp));
    const bool single = sizeof(T) == 4;
    write_dataset(file.get(), path, name, single ? H5T_IEEE_F32LE : H5T_IEEE_F64LE,
                  single ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, {hsize_t(rows), hsize_t(cols)},
                  values.data());
    if (info.loss == "softmax_cross_entropy") {
      std::vector<std::int32_t> classes(static_cast<size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) {
        std::int64_t best = 0;
        for (std::int64_t j = 1; j < cols; ++j)
          if (values[size_t(i * cols + j)] > values[size_t(i * cols + best)]) best = j;
        classes[size_t(i)] = std::int32_t(best);
      }
      write_dataset(file.get(), path, "classes", H5T_STD_I32LE, H5T_NATIVE_INT32, {hsize_t(rows)},
                    classes.data());
    }
    h5::write_attribute(file.get(), "checkpoint", info.checkpoint);
    h5::write_attribute(file.get(), "input", info.input);
    h5::write_attribute(file.get(), "loss", info.loss);
    h5::write_attribute(file.get(), "step", (long long)info.step);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw InputError(fmt::format("{}: cannot rename {} into place", path, tmp));
}

#define GPIPE_INSTANTIATE(T) \
  template void write_predictions<T>(const std::string&, const std::string&, const std::vector<T>&, std::int64_t, std::int64_t, const PredictionInfo&);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

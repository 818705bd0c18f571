// Training data from HDF5 files: valid files and each error with its message.

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "gpipe/core/error.hpp"
#include "gpipe/io/dataset.hpp"

namespace gpipe {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "gpipe_h5data_" + name; }

// Writes a dataset `name` of `type` with `dims` from `data` (in `memory` type) into `file`.
void put(hid_t file, const char* name, hid_t type, hid_t memory, std::vector<hsize_t> dims,
         const void* data) {
  const hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d);
  H5Sclose(space);
}

// A file with inputs (3, 2) float64 and labels (3) int64, plus variants.
std::string make_file(const std::string& name, bool int_inputs = false, bool float_labels = false,
                      hsize_t label_count = 3, bool rank3 = false) {
  const std::string path = temp_path(name);
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const double x[6] = {1, 2, 3, 4, 5, 6};
  const long long xi[6] = {1, 2, 3, 4, 5, 6};
  if (rank3)
    put(f, "inputs", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {3, 1, 2}, x);
  else if (int_inputs)
    put(f, "inputs", H5T_STD_I64LE, H5T_NATIVE_LLONG, {3, 2}, xi);
  else
    put(f, "inputs", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {3, 2}, x);
  const long long y[4] = {2, 0, 1, 1};
  const double yf[4] = {2, 0, 1, 1};
  if (float_labels)
    put(f, "labels", H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE, {label_count}, yf);
  else
    put(f, "labels", H5T_STD_I64LE, H5T_NATIVE_LLONG, {label_count}, y);
  H5Fclose(f);
  return path;
}

std::string error_of(const std::string& path, const std::string& inputs = "inputs") {
  try {
    load_hdf5_dataset(path, inputs, "labels", 0);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Hdf5Dataset, ReadsInputsAndLabels) {
  const auto path = make_file("good.h5");
  const Dataset d = load_hdf5_dataset(path, "inputs", "labels", 0);
  EXPECT_EQ(d.samples, 3);
  EXPECT_EQ(d.features, 2);
  EXPECT_EQ(d.inputs, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{2, 0, 1}));
  const Dataset two = load_hdf5_dataset(path, "inputs", "labels", 2);
  EXPECT_EQ(two.inputs, (std::vector<float>{1, 2, 3, 4}));
  const Dataset labels_only = load_hdf5_dataset(path, "inputs", "labels", 0, false);
  EXPECT_EQ(labels_only.features, 0);
  EXPECT_EQ(labels_only.labels.size(), 3u);
}

TEST(Hdf5Dataset, TrainTestStandardizedWithTrainingStatistics) {
  DataSpec spec;
  spec.format = "hdf5";
  spec.train_file = make_file("train.h5");
  spec.test_file = spec.train_file;
  const auto [train, test] = load_train_test(spec, true);
  EXPECT_FLOAT_EQ(train.inputs[0], float((1 - 3.5) / std::sqrt(35.0 / 12.0)));
  EXPECT_EQ(train.inputs, test.inputs);
  spec.normalize = "scale";
  EXPECT_THROW(load_train_test(spec, true), InputError);
}

TEST(Hdf5DatasetErrors, ExactMessages) {
  EXPECT_EQ(error_of(temp_path("none.h5")), temp_path("none.h5") + ": HDF5 data file not found");
  const auto text = temp_path("text.h5");
  std::ofstream(text) << "not hdf5";
  EXPECT_EQ(error_of(text), text + ": not an HDF5 file");
  const auto good = make_file("good2.h5");
  EXPECT_EQ(error_of(good, "x"), good + ": no dataset 'x' (set data.inputs_dataset in the deck)");
  const auto r3 = make_file("rank3.h5", false, false, 3, true);
  EXPECT_EQ(error_of(r3), r3 + ": dataset 'inputs' has rank 3, expected 2 (samples, features)");
  const auto ints = make_file("ints.h5", true);
  EXPECT_EQ(error_of(ints), ints + ": dataset 'inputs' must hold floating-point values");
  const auto floats = make_file("floats.h5", false, true);
  EXPECT_EQ(error_of(floats), floats + ": dataset 'labels' must hold integer values (float targets need a regression loss: set model.loss to mse, mae or huber)");
  const auto longer = make_file("mismatch.h5", false, false, 4);
  EXPECT_EQ(error_of(longer), longer + ": 'inputs' has 3 samples but 'labels' has 4");
}

// Inputs must be finite: the reader names the file, sample and feature; a
// float64 value beyond float's range is not silently clamped or made inf.
TEST(Hdf5DatasetErrors, NonFiniteInputs) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [name, bad, shown] :
       std::vector<std::tuple<std::string, double, std::string>>{
           {"nan.h5", nan, "nan"},
           {"inf.h5", -std::numeric_limits<double>::infinity(), "-inf"},
           {"big.h5", 1e300, "inf"}}) {
    const std::string path = temp_path(name);
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const double x[6] = {1, 2, 3, bad, 5, 6};
    const long long y[3] = {0, 1, 0};
    put(f, "inputs", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {3, 2}, x);
    put(f, "labels", H5T_STD_I64LE, H5T_NATIVE_LLONG, {3}, y);
    H5Fclose(f);
    EXPECT_EQ(error_of(path), path + ":inputs: sample 1, feature 1 is " + shown +
                                  " (inputs must be finite float values)");
  }
}

// A header claiming more data than the file stores is refused before any
// allocation (here 10^9 x 1000 inputs never written: 4 TB).
TEST(Hdf5DatasetErrors, HeaderBeyondTheFileIsRefused) {
  const std::string path = temp_path("hostile.h5");
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const long long y[3] = {0, 1, 0};
  put(f, "labels", H5T_STD_I64LE, H5T_NATIVE_LLONG, {3}, y);
  H5Fclose(f);
  const hid_t g = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hsize_t dims[2] = {3, 1000000000000ULL};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t d = H5Dcreate2(g, "inputs", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(g);
  const auto size = std::filesystem::file_size(path);
  EXPECT_EQ(error_of(path), path + ": dataset 'inputs': its header declares 3 x 1000000000000 values "
                                   "of 4 bytes (12000000000000 bytes), but only 0 bytes are stored "
                                   "(expected 12000000000000) (the file holds " +
                                std::to_string(size) + " bytes): damaged or truncated file");
}


// Issue 25, class 7: a failed library call reports the library's own reason.
// A data file another process holds locked (flock, as HDF5 >= 1.10 writers
// do): HDF5's lock error and the HDF5_USE_FILE_LOCKING hint, not only
// "cannot open".
TEST(Hdf5DatasetErrors, LockedFileGivesHdf5sReasonAndTheHint) {
  const auto path = make_file("locked.h5");
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // another open file description: conflicts
  const std::string e = error_of(path);
  ::flock(fd, LOCK_UN);
  ::close(fd);
  EXPECT_EQ(e.rfind(path + ": cannot open HDF5 file: HDF5: ", 0), 0u) << e;
  EXPECT_NE(e.find("unable to lock file"), std::string::npos) << e;
  EXPECT_NE(e.find("Resource temporarily unavailable"), std::string::npos) << e;
  EXPECT_NE(e.find("set HDF5_USE_FILE_LOCKING=FALSE"), std::string::npos) << e;
  EXPECT_EQ(error_of(path), "no error");  // unlocked: it loads
}

}  // namespace
}  // namespace gpipe

// The IDX reader on small files the test writes, valid and corrupt.

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gpipe/core/error.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/idx.hpp"

namespace gpipe {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "gpipe_idx_" + name;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string error_of(const std::string& path) {
  try {
    read_idx(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A 2 x 2 x 3 image array with values 0..11.
IdxArray images() {
  IdxArray a;
  a.dims = {2, 2, 3};
  for (int i = 0; i < 12; ++i) a.data.push_back(std::uint8_t(i * 20));
  return a;
}

TEST(Idx, RoundTripPlain) {
  const auto path = temp_path("plain");
  write_idx(path, images());
  const IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{2, 2, 3}));
  EXPECT_EQ(a.data, images().data);
}

TEST(Idx, ReadsGzip) {
  const auto plain = temp_path("src");
  write_idx(plain, images());
  std::ifstream in(plain, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto path = temp_path("data.gz");
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, bytes.data(), unsigned(bytes.size()));
  gzclose(gz);
  const IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{2, 2, 3}));
  EXPECT_EQ(a.data, images().data);
}

TEST(Idx, MissingFile) {
  const auto path = temp_path("does_not_exist");
  EXPECT_EQ(error_of(path), path + ": cannot open IDX file (missing or unreadable)");
}

TEST(Idx, WrongMagic) {
  const auto path = temp_path("magic");
  write_bytes(path, std::string("\x1f\x00\x08\x01\x00\x00\x00\x01\x05", 9));
  EXPECT_EQ(error_of(path), path + ": not an IDX file: magic number starts with 0x1f00, expected 0x0000");
}

TEST(Idx, UnsupportedType) {
  const auto path = temp_path("type");
  write_bytes(path, std::string("\x00\x00\x0d\x01\x00\x00\x00\x01\x05", 9));
  EXPECT_EQ(error_of(path), path + ": unsupported IDX data type 0x0d, expected 0x08 (unsigned byte)");
}

TEST(Idx, TruncatedData) {
  const auto path = temp_path("truncated");
  write_bytes(path, std::string("\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02", 10));
  EXPECT_EQ(error_of(path), path + ": truncated IDX file: header dimensions 5 promise 5 values, found 2");
}

// Header sizes are checked against the file before anything is allocated:
// 0xFFFFFFFF images of 10 x 10 in a 116-byte file (the case), the
// same gzip-compressed (read in blocks, so memory follows the data), and
// dimensions whose product overflows 64 bits.
TEST(Idx, HostileHeaderNeverAllocates) {
  const std::string header("\x00\x00\x08\x03\xff\xff\xff\xff\x00\x00\x00\x0a\x00\x00\x00\x0a", 16);
  const auto path = temp_path("hostile");
  write_bytes(path, header + std::string(100, '\x07'));
  EXPECT_EQ(error_of(path), path + ": truncated IDX file: header dimensions 4294967295 x 10 x 10 "
                                   "promise 429496729500 values, found 100");
  const auto gz = temp_path("hostile.gz");
  {
    gzFile f = gzopen(gz.c_str(), "wb");
    const std::string bytes = header + std::string(100, '\x07');
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  }
  EXPECT_EQ(error_of(gz), gz + ": truncated IDX file: header dimensions 4294967295 x 10 x 10 "
                               "promise 429496729500 values, found 100");
  const auto huge = temp_path("huge");
  write_bytes(huge, std::string("\x00\x00\x08\x04", 4) + std::string(16, '\xff') + "abc");
  EXPECT_EQ(error_of(huge), huge + ": truncated IDX file: header dimensions 4294967295 x 4294967295 x "
                                   "4294967295 x 4294967295 promise more than 2^40 values, found 3");
}

TEST(Idx, TruncatedHeader) {
  const auto path = temp_path("header");
  write_bytes(path, std::string("\x00\x00\x08\x03\x00\x00\x00\x05", 8));
  EXPECT_EQ(error_of(path), path + ": truncated IDX header: dimension 1 of 3 is missing");
}

TEST(Idx, TrailingBytes) {
  const auto path = temp_path("trailing");
  write_bytes(path, std::string("\x00\x00\x08\x01\x00\x00\x00\x01\x05\x06", 10));
  EXPECT_EQ(error_of(path), path + ": unexpected trailing bytes after the 1 values the header declares");
}

TEST(Idx, CorruptGzip) {
  const auto path = temp_path("corrupt.gz");
  // A gzip header followed by garbage deflate data.
  write_bytes(path, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff\xff\xff", 16));
  const std::string e = error_of(path);
  EXPECT_EQ(e.rfind(path + ": corrupt compressed data (", 0), 0u) << e;
}

TEST(Dataset, LoadsAndStandardizes) {
  const auto x = temp_path("x"), y = temp_path("y");
  write_idx(x, images());
  write_idx(y, IdxArray{{2}, {3, 7}});
  Normalization norm;
  norm.mode = "scale";
  Dataset d = load_idx_dataset(x, y, 0, norm, true);
  EXPECT_EQ(d.samples, 2);
  EXPECT_EQ(d.features, 6);
  EXPECT_FLOAT_EQ(d.inputs[1], 20.0f / 255.0f);
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{3, 7}));
  norm.mode = "standardize";
  d = load_idx_dataset(x, y, 0, norm, true);
  double mean = 0;
  for (float v : d.inputs) mean += v;
  EXPECT_NEAR(mean / 12, 0.0, 1e-6);
  EXPECT_NEAR(norm.mean, 110.0 / 255.0, 1e-7);  // float pixels
  d = load_idx_dataset(x, y, 1, norm, false);
  EXPECT_EQ(d.samples, 1);
  try {
    check_labels(d, 3);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              y + ": label 3 of sample 0 is outside [0, 3) (the model's last layer has 3 outputs)");
  }
}

TEST(Dataset, CountMismatch) {
  const auto x = temp_path("x2"), y = temp_path("y2");
  write_idx(x, images());
  write_idx(y, IdxArray{{3}, {1, 2, 3}});
  Normalization norm;
  try {
    load_idx_dataset(x, y, 0, norm, true);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), x + " has 2 images but " + y + " has 3 labels");
  }
}

TEST(Dataset, EpochOrderIsASeededPermutation) {
  const auto a = epoch_order(100, 5, 0, true), b = epoch_order(100, 5, 0, true);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, epoch_order(100, 5, 1, true));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, epoch_order(100, 5, 0, false));
  EXPECT_NE(a, sorted);
}

}  // namespace
}  // namespace gpipe

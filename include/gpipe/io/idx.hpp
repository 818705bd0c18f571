#pragma once
// IDX files (LeCun et al., the MNIST / Fashion-MNIST format), plain or gzip.
//
// Layout: 2 zero bytes, a type byte (0x08 = unsigned byte), a byte with the
// number of dimensions D, D big-endian uint32 sizes, then the values in
// row-major order. Only unsigned-byte data is supported.

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

struct IdxArray {
  std::vector<std::int64_t> dims;  ///< sizes, outermost first
  std::vector<std::uint8_t> data;  ///< product(dims) values, row-major
};

/// Reads an IDX file; gzip-compressed files (.gz) are detected by content.
/// Throws InputError naming the path for: a missing/unreadable file, a bad
/// magic number, an unsupported type, zero dimensions, a truncated file
/// (fewer values than the header promises) or trailing bytes.
IdxArray read_idx(const std::string& path);

/// Writes an uncompressed IDX file of unsigned bytes (for tests and tools).
void write_idx(const std::string& path, const IdxArray& array);

}  // namespace gpipe

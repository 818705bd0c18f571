#include "gpipe/io/idx.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "gpipe/core/error.hpp"

namespace gpipe {

namespace {
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `size` bytes; returns the number actually read.
std::int64_t read_bytes(gzFile file, void* out, std::int64_t size, const std::string& path) {
  auto* bytes = static_cast<unsigned char*>(out);
  std::int64_t done = 0;
  while (done < size) {
    const unsigned chunk = unsigned(std::min<std::int64_t>(size - done, 1 << 30));
    const int got = gzread(file, bytes + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      throw InputError(fmt::format("{}: corrupt compressed data ({})", path, message));
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}
}  // namespace

IdxArray read_idx(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw InputError(fmt::format("{}: cannot open IDX file (missing or unreadable)", path));
  unsigned char magic[4];
  if (read_bytes(file.get(), magic, 4, path) != 4)
    throw InputError(fmt::format("{}: truncated IDX file: fewer than 4 header bytes", path));
  if (magic[0] != 0 || magic[1] != 0)
    throw InputError(fmt::format("{}: not an IDX file: magic number starts with 0x{:02x}{:02x}, "
                                 "expected 0x0000",
                                 path, magic[0], magic[1]));
  if (magic[2] != 0x08)
    throw InputError(fmt::format("{}: unsupported IDX data type 0x{:02x}, expected 0x08 "
                                 "(unsigned byte)",
                                 path, magic[2]));
  const int rank = magic[3];
  if (rank < 1 || rank > 4)
    throw InputError(fmt::format("{}: IDX header declares {} dimensions, expected 1 to 4", path, rank));
  IdxArray array;
  for (int d = 0; d < rank; ++d) {
    unsigned char be[4];
    if (read_bytes(file.get(), be, 4, path) != 4)
      throw InputError(fmt::format("{}: truncated IDX header: dimension {} of {} is missing", path,
                                   d, rank));
    const std::int64_t size = (std::int64_t(be[0]) << 24) | (std::int64_t(be[1]) << 16) |
                              (std::int64_t(be[2]) << 8) | std::int64_t(be[3]);
    if (size == 0) throw InputError(fmt::format("{}: IDX dimension {} has size 0", path, d));
    array.dims.push_back(size);
  }
  // The header's sizes are checked against the file before anything is
  // allocated: product of the dimensions (saturating, no overflow),
  // then the bytes the file really holds (plain files: their size; gzip:
  // the data is read in blocks, so memory follows the data, not the header).
  const std::string shape = fmt::format("{}", fmt::join(array.dims, " x "));
  constexpr std::int64_t kMaxValues = std::int64_t(1) << 40;  // 1 TiB of bytes
  std::int64_t promised = 1;  // saturates above kMaxValues
  for (const auto d : array.dims) promised = promised > kMaxValues / d ? kMaxValues + 1 : promised * d;
  const std::string promise =
      promised > kMaxValues ? "more than 2^40" : std::to_string(promised);
  const std::int64_t header_bytes = 4 + 4 * std::int64_t(rank);
  const auto truncated = [&](std::int64_t held) {
    return InputError(fmt::format("{}: truncated IDX file: header dimensions {} promise {} values, "
                                  "found {}",
                                  path, shape, promise, held));
  };
  if (gzdirect(file.get())) {
    std::error_code ec;
    const auto bytes = std::int64_t(std::filesystem::file_size(path, ec));
    const std::int64_t held = ec ? 0 : std::max<std::int64_t>(bytes - header_bytes, 0);
    if (promised > held) throw truncated(held);
  }
  if (promised > kMaxValues)
    throw InputError(fmt::format("{}: IDX header dimensions {} promise {} values (expected at most "
                                 "2^40)",
                                 path, shape, promise));
  const auto total = std::int64_t(promised);
  // Read in blocks of at most 64 MiB, growing the buffer with the data.
  constexpr std::int64_t kBlock = std::int64_t(64) << 20;
  std::int64_t got = 0;
  while (got < total) {
    const std::int64_t want = std::min(kBlock, total - got);
    array.data.resize(size_t(got + want));
    const std::int64_t n = read_bytes(file.get(), array.data.data() + got, want, path);
    got += n;
    if (n < want) break;
  }
  if (got != total) throw truncated(got);
  unsigned char extra;
  if (read_bytes(file.get(), &extra, 1, path) != 0)
    throw InputError(fmt::format("{}: unexpected trailing bytes after the {} values the header "
                                 "declares",
                                 path, total));
  return array;
}

void write_idx(const std::string& path, const IdxArray& array) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw InputError(fmt::format("{}: cannot open for writing", path));
  const unsigned char magic[4] = {0, 0, 0x08, static_cast<unsigned char>(array.dims.size())};
  out.write(reinterpret_cast<const char*>(magic), 4);
  for (auto d : array.dims) {
    const unsigned char be[4] = {static_cast<unsigned char>(d >> 24), static_cast<unsigned char>(d >> 16),
                                 static_cast<unsigned char>(d >> 8), static_cast<unsigned char>(d)};
    out.write(reinterpret_cast<const char*>(be), 4);
  }
  out.write(reinterpret_cast<const char*>(array.data.data()), std::streamsize(array.data.size()));
  if (!out) throw InputError(fmt::format("{}: write failed", path));
}

}  // namespace gpipe

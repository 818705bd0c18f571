#include "gpipe/io/idx.hpp"

#include <fmt/format.h>
#include <zlib.h>

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
  std::int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char be[4];
    if (read_bytes(file.get(), be, 4, path) != 4)
      throw InputError(fmt::format("{}: truncated IDX header: dimension {} of {} is missing", path,
                                   d, rank));
    const std::int64_t size = (std::int64_t(be[0]) << 24) | (std::int64_t(be[1]) << 16) |
                              (std::int64_t(be[2]) << 8) | std::int64_t(be[3]);
    if (size == 0) throw InputError(fmt::format("{}: IDX dimension {} has size 0", path, d));
    array.dims.push_back(size);
    total *= size;
  }
  array.data.resize(size_t(total));
  const std::int64_t got = read_bytes(file.get(), array.data.data(), total, path);
  if (got != total)
    throw InputError(fmt::format("{}: truncated IDX file: header promises {} values, found {}", path,
                                 total, got));
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

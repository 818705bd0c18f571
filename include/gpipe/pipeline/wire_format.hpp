#pragma once
// Conversion of boundary messages to and from their wire format (the
// precision policy's `wire`, gpipe/core/precision.hpp): with bf16 / fp16 the
// activations and gradients between cells go over MPI as 16-bit values
// (2 bytes each, MPI_UINT16_T), converted from the cell's float buffers when
// a message is packed and back when it is unpacked; float and double go as
// they are (no conversion, no copy). BoundaryBuffer (transport.hpp) calls
// these.

#include <cstdint>

#include "gpipe/core/precision.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe {

/// Whether `format` is a 16-bit wire format (bf16, fp16).
inline bool packed_wire(Format format) { return format == Format::bf16 || format == Format::fp16; }

/// dst[i] = the `format` bits of src[i] (round to nearest even; fp16:
/// overflow to +/-inf) for i < n, on `space` (not fenced). `format` must
/// be bf16 or fp16 (std::invalid_argument otherwise).
void pack_wire(const ExecSpace& space, Format format, const float* src, std::int64_t n, std::uint16_t* dst);
/// dst[i] = float(src[i] as `format`) (exact) for i < n, on `space` (not fenced).
void unpack_wire(const ExecSpace& space, Format format, const std::uint16_t* src, std::int64_t n, float* dst);

/// values[i] = float(format(values[i])) for i < n, in place on `space`
/// (round to nearest even): with a 16-bit wire every layer output and
/// every input gradient of a cell is rounded so (Cell; docs/design.md
/// "Mixed precision"), so the values a message carries are exactly
/// representable, its conversion is lossless and results do not depend on
/// where the cells split. Does nothing unless `format` is bf16 or fp16.
void round_activations(const ExecSpace& space, Format format, float* values, std::int64_t n);
/// round_activations then pack_wire in one pass (one read of values):
/// values[i] = float(format(values[i])) and dst[i] = its `format` bits, for
/// i < n, on `space` (not fenced); bitwise the two calls. `format` must be
/// bf16 or fp16 (std::invalid_argument otherwise).
void round_and_pack_wire(const ExecSpace& space, Format format, float* values, std::int64_t n, std::uint16_t* dst);
/// The same on a double matrix: does nothing (double keeps fp64; a 16-bit
/// wire needs float cells, BoundaryBuffer::set_wire_format).
inline void round_activations(const ExecSpace&, Format, double*, std::int64_t) {}

/// Payload bytes of the boundary messages this process has sent (every
/// BoundaryBuffer::post_send, at the wire format's size), since the start:
/// a training step's difference is the cell's boundary bytes per step.
std::int64_t boundary_bytes_sent();
/// Adds `bytes` to boundary_bytes_sent() (BoundaryBuffer::post_send).
void count_boundary_bytes(std::int64_t bytes);

}  // namespace gpipe

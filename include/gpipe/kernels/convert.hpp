#pragma once
// Conversions between fp32 and bf16 of the kernel seam: the operand copies
// of the bf16 primitives (dispatch.cpp), the bf16 weight copy, and the
// 16-bit activation storage and boundary messages (pipeline/wire_format.hpp)
// all convert through these, so a run converts every value the same way.
//
// Where oneDNN's bf16 primitives run (the native route:
// implementation(Primitive::gemm, 2) is onednn, host memory) the conversion
// is oneDNN's reorder, JIT-compiled for the CPU's widest ISA: 5x the portable
// loop at 256 Ki values on an Intel Xeon with AMX (perf/README.md, "Issue 22:
// conversions through oneDNN"). Its fp32 -> bf16 rounds to nearest even and
// flushes subnormal inputs (|x| < 2^-126) to a zero of the same sign, as
// the AMX and AVX-512 BF16 products treat subnormal operands anyway.
// Everywhere else (the rounded route, GPIPE_KERNELS=portable, device
// memory) it is the portable Kokkos loop of core/half.hpp, which keeps bf16
// subnormals. Both quiet a NaN (the payload's top bits kept, quiet bit set)
// and keep infinities; bf16 -> fp32 is exact in both. Element i's result
// depends only on element i, so results stay bitwise across micro-batch
// counts, K and schedules. Not collective; one host thread.

#include <cstdint>

#include "gpipe/core/half.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe::kernels {

/// Whether to_bf16 runs oneDNN's conversion (subnormals flushed to zero)
/// rather than the portable loop.
bool onednn_converts();

/// dst[i] = bf16(src[i]) for i < n: contiguous arrays in the default memory
/// space, on `space` (not fenced after a portable run; oneDNN runs after a
/// fence of `space` and has finished on return). n <= 0: nothing.
void to_bf16(const ExecSpace& space, const float* src, std::int64_t n, bf16* dst);

/// dst[i] = float(src[i]) (exact) for i < n; the same contract as to_bf16.
void from_bf16(const ExecSpace& space, const bf16* src, std::int64_t n, float* dst);

/// values[i] = float(bf16(values[i])) in place for i < n (to_bf16 then
/// from_bf16, bitwise; the same contract).
void round_to_bf16(const ExecSpace& space, float* values, std::int64_t n);

}  // namespace gpipe::kernels

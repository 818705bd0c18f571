#pragma once
// Internal: the reduced-precision (bf16 / fp16 compute format) support of
// the kernel seam (gpipe/kernels/backend.hpp, set_compute_format): rounding
// and conversion kernels and the process-wide grow-only workspace the
// operand copies live in. dispatch.cpp and conv.cpp call these; the oneDNN
// bf16 primitives are in gemm_onednn.cpp / conv_onednn.cpp.

#include <cstdint>

#include "gpipe/core/half.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe::kernels::reduced {

/// Workspace slots: operands in use at the same time take different slots;
/// held .. held + kHeld - 1 are the copies an OperandReuse scope keeps
/// (gemm.hpp; dispatch.cpp), never taken by a conversion outside one.
constexpr int kHeld = 4;
enum Slot : int { a = 0, b = 1, x = 2, w = 3, dy = 4, held = 5, slots = held + kHeld };

/// True when float primitives round their operands (bf16 or fp16).
bool active(Format format);

/// dst[i] = float(format(src[i])) for i < n (round to nearest even), on
/// `space`. src and dst may be the same memory.
void round(const ExecSpace& space, Format format, const float* src, std::int64_t n, float* dst);
/// dst[i] = bf16(src[i]) for i < n, on `space`.
void to_bf16(const ExecSpace& space, const float* src, std::int64_t n, bf16* dst);

/// A float buffer of at least n values in workspace slot `slot` (grown on
/// demand, kept until Kokkos::finalize).
float* scratch(int slot, std::int64_t n);
/// A bf16 buffer of at least n values in workspace slot `slot` (labelled
/// "gpipe::kernels::reduced::held" for the OperandReuse slots held.., else
/// "gpipe::kernels::reduced::scratch16").
bf16* scratch16(int slot, std::int64_t n);
/// Frees every slot of scratch and scratch16 (not the weight copies), so a
/// measurement starts from none (tests/mpi/test_memory.cpp); the next
/// conversion grows them again. Not inside a seam call or an OperandReuse scope.
void release_scratch();

/// The registered bf16 weight copy (backend.hpp, WeightCopy): the copy of
/// [p, p + n) when that range lies inside the registered parameters, else
/// null. The first call after a registration converts the whole copy (on
/// the registration's space) from the parameters as they are then.
const bf16* weight_copy(const float* p, std::int64_t n);
/// Whether [p, p + n) lies inside the registered bf16 copy's parameters
/// (converts nothing; the packed bf16 weights of gemm_onednn.cpp convert
/// the fp32 parameters themselves).
bool in_weight_copy(const float* p, std::int64_t n);
/// Registers [params, params + n) for the copy (allocated here, exactly n
/// values); converted lazily, at the first weight_copy() read.
void register_weight_copy(const ExecSpace& space, const float* params, std::int64_t n);
/// The rounded route's weight copy (backend.hpp, WeightCopy, where oneDNN's
/// bf16 primitives do not run): [p, p + n) rounded to the compute format,
/// in fp32, when that range lies inside the registered parameters and the
/// copy was rounded to `format`, else null.
const float* rounded_weight_copy(const float* p, std::int64_t n, Format format);
/// Rounds [params, params + n) to `format` into that copy and registers it.
void register_rounded_weight_copy(const ExecSpace& space, Format format, const float* params, std::int64_t n);
/// Unregisters either copy of `params` (if it is the registered one).
void drop_weight_copy(const float* params);

/// `m` rounded into slot `slot`: a (rows, cols) matrix of the same shape;
/// the rounded weight copy itself where `m` lies inside it.
ConstMatrix<float> rounded(const ExecSpace& space, Format format, ConstMatrix<float> m, int slot);

}  // namespace gpipe::kernels::reduced

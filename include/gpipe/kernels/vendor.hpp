#pragma once
// The kernel seam's vendor-library settings and sizes (CUDA builds: the
// cublas and cudnn implementations of gpipe/kernels/backend.hpp): the TF32
// permission of deck key pipeline.tf32, and the device workspaces cuBLAS and
// cuDNN get as Kokkos Views, which the memory model (gpipe/train/memory.hpp)
// counts. Every function here also exists in builds without CUDA, where
// TF32 never applies and the sizes are 0 or refused (see each).
//
// What the seam's summaries add: kernels::selection_summary() (the run
// record's kernels.selected, --version's "kernels selected" line) ends with
// "; " and tf32_summary(); kernels::build_summary() (--version) ends with
// "; TF32 (pipeline.tf32): cublas, cudnn float on compute capability >= 8.0"
// (the implementations built that can use it) or "; TF32 (pipeline.tf32):
// none in this build".

#include <cstdint>
#include <string>

#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/conv.hpp"

namespace gpipe::kernels {

/// TF32 for the float GEMMs and convolutions (deck key pipeline.tf32;
/// process-wide like the choice, set by Pipeline's constructor from the deck
/// before any layer exists; default false). When allowed, the float
/// primitives that run on a vendor library with TF32 may multiply in TF32
/// (10-bit mantissa operands, fp32 accumulation):
///   cublas  gemm, gemm_bias, batched_gemm: CUBLAS_COMPUTE_32F_FAST_TF32
///           (read at every call);
///   cudnn   conv2d: math type CUDNN_TENSOR_OP_MATH (fixed when the layer's
///           Conv2d is constructed);
/// on a GPU of compute capability 8.0 or newer (Ampere, Hopper, ...). Every
/// other primitive and implementation (portable, oneDNN, double, the bf16 /
/// fp16 compute formats, the CPU backends) computes in full fp32 whatever
/// the key says: on a backend without TF32 the key has no effect, and
/// tf32_note() says so once per process. TF32 rounds each operand to 11
/// significant bits, so results differ from fp32 in about the fourth
/// significant digit and the project's bitwise guarantees between
/// implementations do not hold; runs stay repeatable (same algorithms),
/// and partition/remat invariants hold as far as cuBLAS's and cuDNN's do in
/// fp32 (docs/input-deck.md, docs/porting.md). NVIDIA's environment
/// variable NVIDIA_TF32_OVERRIDE=0 turns TF32 off in both libraries
/// whatever the key. Not collective; thread-safe.
void set_tf32(bool allowed);
bool tf32_allowed();

/// Whether `implementation` runs `primitive` at float in TF32 when allowed
/// (the cublas GEMMs and cudnn conv2d, on a GPU of compute capability >= 8.0);
/// false for every other pair and in builds without cuBLAS / cuDNN.
bool has_tf32(Implementation implementation, Primitive primitive);

/// Whether a float `primitive` runs in TF32 now: tf32_allowed() and
/// has_tf32(implementation(primitive, 4), primitive).
bool uses_tf32(Primitive primitive);

/// One phrase for the run record and logs: "tf32 off", "tf32 on: gemm,
/// gemm_bias, batched_gemm, conv2d" (the float primitives that use it), or
/// "tf32 requested, no effect: no float primitive of this run has TF32
/// (fp32 throughout)".
std::string tf32_summary();

/// The note for a run that allows TF32 where no primitive has it (the
/// summary's "no effect" text, with the key's name), returned once per
/// process (the first call after such a set_tf32(true)); "" otherwise.
/// Pipeline's constructor logs it on rank 0.
std::string tf32_note();

/// The device bytes the cublas implementation allocates for each stream it
/// runs on: its cuBLAS / cuBLASLt workspace (32 MiB, a Kokkos View made at
/// the first call on that stream; one per process here, since every cell
/// runs on the default execution-space instance). 0 in builds without
/// cuBLAS. The memory model counts it (gpipe/train/memory.hpp, workspaces).
std::int64_t cublas_workspace_bytes();


/// The bytes of the device workspace the cudnn implementation allocates for
/// calls of up to `n` samples of `shape` at `scalar_bytes` (4: float, 8:
/// double): the largest of cuDNN's workspace sizes for its three fixed
/// algorithms at the math type in force (pipeline.tf32, set_tf32), the one
/// View Conv2d::reserve(n) allocates (none for 0 bytes; Kokkos rounds the
/// View up to 8 bytes). The memory model counts it for each conv2d / conv1d
/// layer whose implementation is cudnn (the layer's registry workspace).
/// cuDNN answers only through a handle on a CUDA device: throws
/// std::runtime_error (advising a GPU node or kernels: portable) without
/// one; std::invalid_argument "gpipe::kernels::cudnn_workspace_bytes: this
/// build has no cuDNN (GPIPE_ENABLE_CUDNN=OFF)" in a build without cuDNN,
/// and for a scalar size other than 4 or 8. Allocates nothing; not
/// collective.
std::int64_t cudnn_workspace_bytes(const ConvShape& shape, std::int64_t n, int scalar_bytes);

}  // namespace gpipe::kernels

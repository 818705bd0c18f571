#pragma once
// The kernel seam: which implementations of the heavy primitives (dense GEMM,
// strided-batched GEMM, scaled-dot-product attention, 2-D convolution) this
// build has, and which one each primitive runs. Layers call the primitives
// in gpipe/kernels/gemm.hpp and gpipe/kernels/attention.hpp (and conv's);
// the choice of implementation lives here and in src/kernels/, never in
// layer code (as Kokkos Kernels picks its TPLs).
//
// Implementations:
//   portable  Kokkos + Kokkos Kernels (KokkosBlas, whose TPL here is
//             OpenBLAS). Always built; the reference every other one is
//             tested against (tests/unit/test_kernels_*.cpp), and the only
//             one on backends without a vendor library.
//   onednn    oneDNN (x86 CPUs; CMake option GPIPE_ENABLE_ONEDNN, on where
//             oneDNN is found). Host memory spaces only: on a device
//             backend it is never chosen.
//   cublas    cuBLAS / cuBLASLt (CUDA builds; CMake option
//             GPIPE_ENABLE_CUBLAS, on where the Kokkos CUDA backend and
//             CUDAToolkit are found): gemm (cublasLtMatmul), gemm_bias (its
//             bias epilogue), batched_gemm (cublasGemmStridedBatchedEx), at
//             float and double; deterministic choices in
//             src/kernels/gemm_cublas.cpp. Device memory only.
//   cudnn     cuDNN 9 (CUDA builds; CMake option GPIPE_ENABLE_CUDNN, on
//             where the Kokkos CUDA backend, CUDAToolkit and cuDNN >= 9 are
//             found): conv2d (forward, backward-data, backward-weights;
//             conv1d too) at float and double, deterministic algorithms
//             only, no TF32 (src/kernels/conv_cudnn.cpp). Device memory only.
// Choice (process-wide): the deck's top-level `kernels:` key, overridden by
// the environment variable GPIPE_KERNELS (for tests and comparisons):
//   auto      each primitive at each precision runs the implementation that
//             measured fastest (perf/bench_kernels.cpp; table in
//             perf/README.md, "Kernel seam"); the default.
//   portable  every primitive runs the portable reference.
//   onednn    every primitive that has a oneDNN implementation at that
//             precision runs it (the others portable). InputError in a
//             build without oneDNN.
//   cublas    likewise for cuBLAS; InputError in a build without it.
//   cudnn     likewise for cuDNN (conv2d); InputError in a build without it.

#include <string>
#include <vector>

#include "gpipe/core/precision.hpp"
#include "gpipe/core/views.hpp"

namespace gpipe::kernels {

/// One implementation of the seam's primitives.
enum class Implementation { portable, onednn, cublas, cudnn };

/// The primitives behind the seam (see gemm.hpp, attention.hpp).
enum class Primitive {
  gemm,          ///< C = alpha op(A) op(B) + beta C
  gemm_bias,     ///< Y = X W + b (bias epilogue)
  batched_gemm,  ///< strided-batched GEMM over a 2-level batch
  attention,     ///< scaled-dot-product attention, forward and backward
  conv2d,        ///< 2-D convolution, forward / backward-data / backward-weights
  eltwise,       ///< element-wise activations, forward and backward (eltwise.hpp; oneDNN at float only)
};

/// The process-wide choice (deck key `kernels`, environment GPIPE_KERNELS).
enum class Choice { automatic, portable, onednn, cublas, cudnn };

/// "portable", "onednn", "cublas", "cudnn".
const char* name(Implementation implementation);
/// "gemm", "gemm_bias", "batched_gemm", "attention", "conv2d", "eltwise".
const char* name(Primitive primitive);
/// "auto", "portable", "onednn", "cublas", "cudnn".
const char* name(Choice choice);

/// The implementations compiled into this build, portable first.
std::vector<Implementation> available();

/// Whether this build has `implementation` for `primitive` at the precision
/// of `scalar_bytes` (4: float, 8: double, 2: bf16 operands with fp32
/// accumulation and fp32 results; oneDNN has gemm, gemm_bias, batched_gemm,
/// attention (through its batched GEMMs) and conv2d there).
bool has(Implementation implementation, Primitive primitive, int scalar_bytes);

/// Parses a choice ("auto", "portable", "onednn", "cublas", "cudnn").
/// Throws InputError naming `field` (e.g. "deck.yaml: kernels" or
/// "GPIPE_KERNELS") for another word, and for "onednn" / "cublas" /
/// "cudnn" in a build without it.
Choice parse_choice(const std::string& text, const std::string& field);

/// Sets the process-wide choice (not collective; every rank of a run sets
/// the same one from the deck). Thread-safe.
void select(Choice choice);

/// The choice in force: GPIPE_KERNELS when set (parsed once; InputError
/// when invalid), else the last select() (default automatic).
Choice selected();

/// The implementation `primitive` runs at `scalar_bytes` (2: bf16, 4 or 8)
/// under the choice in force.
Implementation implementation(Primitive primitive, int scalar_bytes);

/// The compute format of the float primitives (process-wide, like the
/// choice; the precision policy's `compute`, gpipe/core/precision.hpp; set by
/// Pipeline's constructor from the deck). fp32 (the default) and fp64: the
/// primitives run as before, bitwise. bf16 / fp16: every float primitive
/// rounds its multiplied operands to the format (round to nearest even) and
/// accumulates and writes in fp32:
///   gemm, gemm_bias   op(A), op(B) / X, W rounded; C, bias, Y fp32
///   batched_gemm      every A(o,i), B(o,i) rounded; C fp32
///   attention         its five batched GEMMs' operands rounded (Q, K, V,
///                     P, dO, dS); the softmax and its backward in fp32
///   conv2d            x, w and dy rounded; y, dx, dw, db fp32
/// With bf16 the oneDNN implementation (where chosen: implementation(p, 2);
/// `auto` chooses it only where oneDNN may dispatch AMX, since without AMX
/// its AVX-512 BF16 kernels ran slower than its f32 ones) converts the
/// operands to 16-bit storage and runs its bf16 matmul / convolution;
/// otherwise (implementation(p, 2) portable: the rounded route) the operands
/// are rounded into fp32 copies and implementation(p, 4) runs its fp32
/// kernels on them; fp16 always takes the rounded route (oneDNN 2.6 has no
/// f16 on CPUs). Every product of two rounded operands is
/// exact in fp32, so implementations differ only in summation order
/// (tests/unit/test_kernels_reduced.cpp). The operand copies live in a
/// process-wide grow-only workspace (nothing allocated in steady state).
/// fp64 is treated as fp32 (no rounding). Not collective; thread-safe.
void set_compute_format(Format format);
Format compute_format();

/// Sets the compute format for its lifetime and restores the previous one.
class ComputeScope {
 public:
  explicit ComputeScope(Format format) : previous_(compute_format()) { set_compute_format(format); }
  ~ComputeScope() { set_compute_format(previous_); }
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  Format previous_;
};

/// The reduced-precision copy of a cell's master weights: refresh() converts
/// the float parameter vector [params, params + n) in one kernel (on
/// `space`) and registers it, so that while it is registered the primitives
/// read an operand lying inside that range from the copy instead of
/// converting it per call: bf16 values (2 bytes each) where oneDNN's bf16
/// primitives run (compute format bf16, implementation(gemm, 2) oneDNN),
/// else the values rounded to the compute format as fp32 (4 bytes each; the
/// rounded route, bf16 or fp16). The caller refreshes it
/// whenever the weights may have changed before they are read again
/// (Pipeline: before every training step, evaluation and prediction, i.e.
/// after each optimizer step, checkpoint load or parameter upload). Does
/// nothing unless the compute format is bf16 or fp16.
/// One copy per process (the last refreshed); the destructor unregisters
/// it. Not collective; one host thread.
class WeightCopy {
 public:
  WeightCopy() = default;
  ~WeightCopy();
  WeightCopy(const WeightCopy&) = delete;
  WeightCopy& operator=(const WeightCopy&) = delete;
  void refresh(const ExecSpace& space, const float* params, std::int64_t n);

 private:
  const float* params_ = nullptr;
};

/// One line for --version: the implementations built, with versions, e.g.
/// "kernels: portable (Kokkos Kernels 3.4.1), onednn (oneDNN 2.6.3)"; a
/// CUDA build adds "cublas (cuBLAS 13.0.0: ...)" and "cudnn (cuDNN 9.19.0:
/// conv2d)", or says which is not built.
std::string build_summary();

/// The choice in force and each primitive's implementation at float and
/// double, e.g. "auto: gemm float portable, ... attention float onednn, ...",
/// for the run record and logs.
std::string selection_summary();

}  // namespace gpipe::kernels

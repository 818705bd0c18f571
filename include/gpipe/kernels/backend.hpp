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
/// attention (through its batched GEMMs) and conv2d there, on CPUs where it
/// dispatches avx512_core or more: oneDNN 2.6 has no bf16 primitive below
/// AVX-512, so on an AVX2 CPU bf16 takes the rounded route on the f32
/// primitives).
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

/// What the bf16 route rule reads of the CPU (kernels::this_cpu()): its
/// vendor (x86 CPUID) and the bf16 ISAs oneDNN may dispatch on it (its
/// effective ISA, so ONEDNN_MAX_CPU_ISA is honoured). Constant for a run.
enum class CpuVendor { intel, amd, other };
struct CpuTraits {
  CpuVendor vendor = CpuVendor::other;
  bool avx512_bf16 = false;  ///< oneDNN may dispatch avx512_core_bf16 (AVX-512 BF16 dot products)
  bool amx = false;          ///< oneDNN may dispatch avx512_core_amx (AMX tiles, bf16)
  bool avx512_core = false;  ///< oneDNN may dispatch avx512_core (its brgemm matmul; bf16 data types at all)
};

/// This process's CPU: the vendor, and oneDNN's effective ISA (all false
/// in a build without oneDNN, and on a CPU that is not x86). Asked once.
CpuTraits this_cpu();

/// "intel", "amd", "other".
const char* name(CpuVendor vendor);

/// The f32 dense GEMM rule of `kernels: auto`: whether gemm and gemm_bias at
/// float run oneDNN (true) or the portable ones (false). True where oneDNN
/// dispatches avx512_core or more (cpu.avx512_core): its brgemm matmul
/// gives a row the same bits whatever the call's row count (pinned by
/// KernelsGemm.RepeatableAndOneDnnRowsIndependentOfRowCount), the premise
/// of the bitwise invariants of a Dense model across micro-batch counts
/// (KernelSeamPipeline.OneDnnDenseModelBitwiseAcrossMicroBatchCounts). Below
/// it (an AVX2 CPU) oneDNN runs its JIT sgemm, whose blocking depends on the
/// row count: under ONEDNN_MAX_CPU_ISA=AVX2 a row of a k 784 x n 1024 product
/// differs between a 1-row and a 256-row call, and the epoch reports of
/// Metrics.OneDnnEpochReportsBitwiseAcrossKAndM differ across K and M, which
/// the portable GEMM keeps bitwise; so `auto` runs the portable GEMM there
/// (the reference; oneDNN's sgemm ran the quickstart MLP at 1.07-1.16x it,
/// ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell on an Intel Xeon: given
/// up for the invariants). `kernels: onednn` still runs oneDNN's, without
/// them, and packs no weights (FrozenWeights products are the plain ones).
/// Neither GEMM keeps every row's bits below AVX-512 (OpenBLAS blocks 16
/// rows), so the bitwise-across-M test of a Dense model is skipped there.
/// A pure function of its argument. The other float primitives
/// (batched_gemm, attention, conv2d, eltwise) keep oneDNN below AVX-512.
bool onednn_f32_gemm_rule(const CpuTraits& cpu);

/// The bf16 route rule of `kernels: auto`: whether `primitive` at bf16
/// (implementation(p, 2)) runs oneDNN's native bf16 primitive (true) or
/// the rounded route (false: operands rounded to bf16 in fp32 buffers, then
/// the f32 primitive). A pure function of its arguments, never of a
/// timing, so every rank of a run on the same CPU model takes the same
/// choice and a run is reproducible; pinned by
/// tests/unit/test_reduced_precision.cpp (ReducedPrecision.Bf16RouteRule).
/// Its source is measurement (one thread, Debian's oneDNN 2.6.3,
/// perf/mixed_precision/bench_onednn_bf16.cpp; perf/README.md "Issue 22"):
///   AMX (any vendor)                 native: 832 GFLOP/s bf16 against
///                                    274 f32 at 256x1024x1024 (issue 22)
///   Intel, AVX-512 BF16, no AMX      rounded: oneDNN's bf16 matmul ran
///                                    0.47-0.99x, its bf16 convolution
///                                    0.4-0.6x its f32 ones (Xeon)
///   AMD, AVX-512 BF16, no AMX        native: bf16 matmul 1.3-3.0x its f32
///                                    at every deck shape, convolution
///                                    (forward + both backwards, the CNN's
///                                    three layers) 1.4-1.5x (AMD EPYC,
///                                    family 0x1A, Zen 5, measured; every
///                                    AMD CPU with AVX-512 BF16, Zen 4
///                                    too, takes this row unmeasured)
///   no AVX-512 BF16, other vendors   rounded (no bf16 kernel measured)
/// eltwise has no bf16 primitive: false.
bool bf16_native_rule(const CpuTraits& cpu, Primitive primitive);

/// The override of the bf16 route (environment GPIPE_BF16_ROUTE, or
/// select_bf16_route for tests): `auto` (default) follows bf16_native_rule
/// under `kernels: auto` and runs the native primitives under `kernels:
/// onednn`; `native` runs oneDNN's bf16 primitives wherever oneDNN has one
/// (unless `kernels: portable`); `rounded` never runs them (the rounded
/// route on the float implementation the choice picks). fp16 always takes
/// the rounded route.
enum class Bf16Route { automatic, native, rounded };
/// "auto", "native", "rounded".
const char* name(Bf16Route route);
/// Parses "auto", "native" or "rounded"; InputError naming `field` else.
Bf16Route parse_bf16_route(const std::string& text, const std::string& field);
/// Sets the process-wide route (not collective; thread-safe).
void select_bf16_route(Bf16Route route);
/// GPIPE_BF16_ROUTE when set (parsed once; InputError when invalid), else
/// the last select_bf16_route() (default automatic).
Bf16Route selected_bf16_route();

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
///                     (oneDNN's where implementation(attention, 4) is
///                     oneDNN); on the native bf16 route each operand is
///                     converted once per call, into the head-major and
///                     transposed layouts oneDNN's brgemm takes (dispatch.cpp)
///   eltwise           not rounded: fp32 work on implementation(eltwise, 4)
///   conv2d            x, w and dy rounded; y, dx, dw, db fp32
/// With bf16 the oneDNN implementation (where chosen: implementation(p, 2);
/// `auto` chooses it where bf16_native_rule says so: AMX, or an AMD CPU
/// with AVX-512 BF16; an Intel CPU without AMX takes the rounded route,
/// since there its AVX-512 BF16 kernels ran slower than its f32 ones) converts the
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

/// The reduced-precision copy of a cell's master weights: refresh() registers
/// the float parameter vector [params, params + n) and converts it in one
/// kernel (on `space`), so that while it is registered the primitives
/// read an operand lying inside that range from the copy instead of
/// converting it per call: bf16 values (2 bytes each) where oneDNN's bf16
/// primitives run (compute format bf16, implementation(gemm, 2) oneDNN),
/// else the values rounded to the compute format as fp32 (4 bytes each; the
/// rounded route, bf16 or fp16). The bf16 copy is converted lazily, at the
/// first primitive that reads it after refresh(): in a FrozenWeights scope
/// gemm_bias_weights / gemm_weights convert and pack their W from the fp32
/// parameters themselves (gemm.hpp), so a step of Dense layers alone never
/// converts the copy. The caller refreshes it
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

/// The choice in force and each primitive's implementation at float,
/// double and bf16, e.g. "auto: gemm float portable, ... attention float
/// onednn, ...; bf16 route auto (cpu amd, avx512_bf16, no amx: native);
/// tf32 off", for --version, the run record and logs.
std::string selection_summary();

/// The bf16 route in force and what the rule decides on this CPU, e.g.
/// "bf16 route auto (cpu amd, avx512_bf16, no amx: rule native)"; part of
/// selection_summary().
std::string bf16_route_summary();

}  // namespace gpipe::kernels

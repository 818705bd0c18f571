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

#include <string>
#include <vector>

namespace gpipe::kernels {

/// One implementation of the seam's primitives.
enum class Implementation { portable, onednn, cublas };

/// The primitives behind the seam (see gemm.hpp, attention.hpp).
enum class Primitive {
  gemm,          ///< C = alpha op(A) op(B) + beta C
  gemm_bias,     ///< Y = X W + b (bias epilogue)
  batched_gemm,  ///< strided-batched GEMM over a 2-level batch
  attention,     ///< scaled-dot-product attention, forward and backward
  conv2d,        ///< 2-D convolution, forward / backward-data / backward-weights
};

/// The process-wide choice (deck key `kernels`, environment GPIPE_KERNELS).
enum class Choice { automatic, portable, onednn, cublas };

/// "portable", "onednn", "cublas".
const char* name(Implementation implementation);
/// "gemm", "gemm_bias", "batched_gemm", "attention", "conv2d".
const char* name(Primitive primitive);
/// "auto", "portable", "onednn", "cublas".
const char* name(Choice choice);

/// The implementations compiled into this build, portable first.
std::vector<Implementation> available();

/// Whether this build has `implementation` for `primitive` at the precision
/// of `scalar_bytes` (4: float, 8: double).
bool has(Implementation implementation, Primitive primitive, int scalar_bytes);

/// Parses a choice ("auto", "portable", "onednn", "cublas"). Throws
/// InputError naming `field` (e.g. "deck.yaml: kernels" or "GPIPE_KERNELS")
/// for another word, and for "onednn" / "cublas" in a build without it.
Choice parse_choice(const std::string& text, const std::string& field);

/// Sets the process-wide choice (not collective; every rank of a run sets
/// the same one from the deck). Thread-safe.
void select(Choice choice);

/// The choice in force: GPIPE_KERNELS when set (parsed once; InputError
/// when invalid), else the last select() (default automatic).
Choice selected();

/// The implementation `primitive` runs at `scalar_bytes` (4 or 8) under
/// the choice in force.
Implementation implementation(Primitive primitive, int scalar_bytes);

/// One line for --version: the implementations built, with versions, e.g.
/// "kernels: portable (Kokkos Kernels 3.4.1), onednn (oneDNN 2.6.3)"; a
/// CUDA build adds "cublas (cuBLAS 13.0.0)" or says it is not built.
std::string build_summary();

/// The choice in force and each primitive's implementation at float and
/// double, e.g. "auto: gemm float portable, ... attention float onednn, ...",
/// for the run record and logs.
std::string selection_summary();

}  // namespace gpipe::kernels

#pragma once
// Element-wise activation primitives of the kernel seam
// (gpipe/kernels/backend.hpp picks the implementation; Primitive::eltwise).
// The portable implementation is the activation layer's own Kokkos loop
// (src/layers/activations.cpp): these functions return false when it is in
// force, and the layer then runs it, so the portable path is one source.
// The oneDNN implementation (float, host memory; also under a reduced
// compute format: an activation is fp32 work there, so bf16 / fp16 runs
// take implementation(eltwise, 4) and give bitwise the float results) is oneDNN's JIT eltwise
// primitive, cached by length: forward and backward about 10x the scalar
// loop here (perf/README.md, "Issue 21: where the time goes"). Rounding
// differs from the portable loop's (within a few float roundings; tested in
// tests/unit/test_layers.cpp, FloatGeluOneDnnAgainstPortable); each
// implementation is deterministic and element i's result depends only on
// element i, so results stay bitwise across micro-batch counts, K and
// schedules. NaN propagates in both.

#include <cstdint>

#include "gpipe/core/views.hpp"

namespace gpipe::kernels {

/// The activation functions the seam has.
enum class Eltwise {
  /// GELU, tanh form (Hendrycks & Gimpel 2016): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  gelu_tanh,
};

/// y_i = f(x_i) for i in [0, n): contiguous arrays in the default memory
/// space (x and y may be the same array). Returns false, having done
/// nothing, when the portable implementation is in force for T (the caller
/// runs its own loop). Runs on `space` (fenced before the vendor call).
template <class T>
bool eltwise_forward(const ExecSpace& space, Eltwise f, const T* x, T* y, std::int64_t n);

/// dx_i = dy_i f'(x_i) for i in [0, n), x the forward's input; the same
/// contract as eltwise_forward (dx may be dy's array).
template <class T>
bool eltwise_backward(const ExecSpace& space, Eltwise f, const T* x, const T* dy, T* dx, std::int64_t n);

}  // namespace gpipe::kernels

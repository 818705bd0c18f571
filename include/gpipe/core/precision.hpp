#pragma once
// The precision policy: which number format each kind of tensor of a run
// uses (docs/design.md, "Mixed precision"), chosen by the deck's top-level
// `precision:` key (docs/input-deck.md), and the one dispatch from it to the
// scalar type the library is instantiated at.
//
//   precision  compute  accumulate  master  wire   loss scaling
//   float      fp32     fp32        fp32    fp32   no
//   double     fp64     fp64        fp64    fp64   no
//   bf16       bf16     fp32        fp32    bf16   no
//   fp16       fp16     fp32        fp32    fp16   dynamic (training.loss_scale)
//
// compute:    the operands of the seam's heavy primitives (GEMM, strided-
//             batched GEMM, attention, convolution: gpipe/kernels/*.hpp) are
//             rounded to this format (round to nearest even) before they are
//             multiplied; every product is exact in fp32 (8x8 / 11x11-bit
//             significands), so implementations differ only in summation order.
// accumulate: the format of every sum (GEMM accumulators, reductions,
//             element-wise layers, the loss): fp32 for the 16-bit policies.
// master:     the layers' parameters, their gradients, the optimizer state
//             and the checkpoint: the scalar type T of Layer<T>, Cell<T>,
//             Optimizer<T>, ... (float for bf16 and fp16, so a checkpoint of
//             a bf16 run restarts in float or fp16 and vice versa).
// wire:       the boundary activations and gradients between cells, converted
//             at pack/unpack (gpipe/pipeline/wire_format.hpp): 2 bytes a value
//             for bf16/fp16.
// float and double are the policies the library had before 16-bit formats:
// bitwise unchanged.

#include <cstdint>
#include <string>
#include <type_traits>

namespace gpipe {

/// A number format.
enum class Format { fp16, bf16, fp32, fp64 };

/// "fp16", "bf16", "fp32", "fp64".
const char* name(Format format);
/// Bytes of one value: 2, 2, 4, 8.
int bytes(Format format);

/// The formats of one run (see the table above).
struct Precision {
  std::string name = "float";  ///< the deck's word: float | double | bf16 | fp16
  Format compute = Format::fp32;
  Format accumulate = Format::fp32;
  Format master = Format::fp32;
  Format wire = Format::fp32;
  bool loss_scaling = false;  ///< dynamic loss scaling (fp16)
  /// Bytes of the master scalar T (4 or 8): the instantiation the run uses.
  int master_bytes() const { return bytes(master); }
  /// Bytes of one boundary value on the wire (2, 4 or 8).
  int wire_bytes() const { return bytes(wire); }
  /// True for bf16 and fp16: the compute format is not the master format.
  bool reduced() const { return compute != master; }
};

/// The deck words, in documentation order: "float", "double", "bf16", "fp16".
const char* const* precision_names();
constexpr int kPrecisionCount = 4;

/// The policy of deck word `text`. Throws InputError naming `field` (e.g.
/// "deck.yaml: precision") for another word.
Precision precision_policy(const std::string& text, const std::string& field = "precision");

/// The explicit-instantiation list of every precision-templated class and
/// function: X(float) X(double). Each source file defines its own X
/// (e.g. `#define GPIPE_INSTANTIATE(T) template class Dense<T>;`) and
/// expands GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE); a new master type is
/// added here once.
#define GPIPE_FOR_EACH_SCALAR(X) X(float) X(double)

/// The one dispatch from a precision to the instantiated code: calls
/// `f(T{})` with T the policy's master scalar (double for "double", float
/// for "float", "bf16" and "fp16") and returns its result, e.g.
///   with_scalar(deck.precision, [&](auto t) { return train<decltype(t)>(deck); });
/// Throws InputError (precision_policy) for an unknown word. The compute and
/// wire formats are not template parameters: the seam and the transport
/// read them from the Precision at run time (kernels::ComputeScope, the
/// cell's wire format).
template <class F>
decltype(auto) with_scalar(const std::string& precision, F&& f) {
  const Precision p = precision_policy(precision);
  if (p.master == Format::fp64) return f(double{});
  return f(float{});
}

}  // namespace gpipe

// Reduced-precision support of the kernel seam (reduced.hpp): rounding
// kernels and the grow-only operand workspace.
#include "reduced.hpp"

#include "gpipe/kernels/convert.hpp"

#include <array>
#include <string>

namespace gpipe::kernels::reduced {

namespace {

template <class V>
using Unmanaged = Kokkos::View<V*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

struct Workspace {
  std::array<Vector<float>, slots> f32;
  std::array<Kokkos::View<bf16*, MemSpace>, slots> b16;
  Kokkos::View<bf16*, MemSpace> weights;  // the registered weight copy
  const float* weights_of = nullptr;      // its float parameters (null: none registered)
  std::int64_t weights_n = 0;
  bool weights_stale = false;             // registered, not yet converted (converted at the first read)
  ExecSpace weights_space;                // the space of that conversion
  Vector<float> rounded;                  // the rounded route's weight copy (fp32 values of the format)
  const float* rounded_of = nullptr;
  std::int64_t rounded_n = 0;
  Format rounded_format = Format::fp32;
};

// Heap-allocated and released by a Kokkos finalize hook (a static View
// would be destroyed after Kokkos::finalize).
Workspace& workspace() {
  static Workspace* w = [] {
    auto* p = new Workspace();
    Kokkos::push_finalize_hook([p] { *p = Workspace(); });
    return p;
  }();
  return *w;
}

}  // namespace

bool active(Format format) { return format == Format::bf16 || format == Format::fp16; }

void round(const ExecSpace& space, Format format, const float* src, std::int64_t n, float* dst) {
  const Unmanaged<const float> s(src, size_t(n));
  const Unmanaged<float> d(dst, size_t(n));
  if (format == Format::bf16)
    Kokkos::parallel_for(
        "gpipe::kernels::round_bf16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { d(i) = float(bf16(s(i))); });
  else if (format == Format::fp16)
    Kokkos::parallel_for(
        "gpipe::kernels::round_fp16", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { d(i) = float(fp16(s(i))); });
  else if (src != dst)
    Kokkos::deep_copy(space, d, s);
}

void to_bf16(const ExecSpace& space, const float* src, std::int64_t n, bf16* dst) {
  kernels::to_bf16(space, src, n, dst);  // convert.hpp: oneDNN's reorder on the native route
}

float* scratch(int slot, std::int64_t n) {
  auto& v = workspace().f32[size_t(slot)];
  if (std::int64_t(v.extent(0)) < n) {
    v = Vector<float>();  // freed before the larger one is allocated: the peak holds one
    v = Vector<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::kernels::reduced::scratch"),
                      size_t(n));
  }
  return v.data();
}

bf16* scratch16(int slot, std::int64_t n) {
  auto& v = workspace().b16[size_t(slot)];
  if (std::int64_t(v.extent(0)) < n) {
    v = Kokkos::View<bf16*, MemSpace>();
    // The OperandReuse slots under a label of their own: the memory model
    // counts them exactly (train/memory.hpp, CellMemory::seam_reuse).
    v = Kokkos::View<bf16*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing,
                           std::string(slot >= held ? "gpipe::kernels::reduced::held"
                                                    : "gpipe::kernels::reduced::scratch16")),
        size_t(n));
  }
  return v.data();
}

void release_scratch() {
  Workspace& w = workspace();
  for (auto& v : w.f32) v = Vector<float>();
  for (auto& v : w.b16) v = Kokkos::View<bf16*, MemSpace>();
}

bool in_weight_copy(const float* p, std::int64_t n) {
  const Workspace& w = workspace();
  return w.weights_of != nullptr && p >= w.weights_of && p + n <= w.weights_of + w.weights_n;
}

const bf16* weight_copy(const float* p, std::int64_t n) {
  Workspace& w = workspace();
  if (!in_weight_copy(p, n)) return nullptr;
  if (w.weights_stale) {  // the first read since the registration: convert the whole copy now
    to_bf16(w.weights_space, w.weights_of, w.weights_n, w.weights.data());
    w.weights_stale = false;
  }
  return w.weights.data() + (p - w.weights_of);
}

void register_weight_copy(const ExecSpace& space, const float* params, std::int64_t n) {
  Workspace& w = workspace();
  if (w.rounded_of) drop_weight_copy(w.rounded_of);  // one copy per process
  if (std::int64_t(w.weights.extent(0)) != n) {  // exactly the registered parameters (cell_memory's weight_copy)
    w.weights = Kokkos::View<bf16*, MemSpace>();
    w.weights = Kokkos::View<bf16*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::kernels::weight_copy"), size_t(n));
  }
  w.weights_of = params;
  w.weights_n = n;
  w.weights_stale = true;
  w.weights_space = space;
}

const float* rounded_weight_copy(const float* p, std::int64_t n, Format format) {
  const Workspace& w = workspace();
  if (w.rounded_of == nullptr || w.rounded_format != format || p < w.rounded_of || p + n > w.rounded_of + w.rounded_n) return nullptr;
  return w.rounded.data() + (p - w.rounded_of);
}

void register_rounded_weight_copy(const ExecSpace& space, Format format, const float* params, std::int64_t n) {
  Workspace& w = workspace();
  if (w.weights_of) drop_weight_copy(w.weights_of);  // one copy per process
  if (std::int64_t(w.rounded.extent(0)) != n) {
    w.rounded = Vector<float>();
    w.rounded = Vector<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::kernels::weight_copy"),
                              size_t(n));
  }
  w.rounded_of = nullptr;  // round() below reads params, not the copy
  round(space, format, params, n, w.rounded.data());
  w.rounded_of = params;
  w.rounded_n = n;
  w.rounded_format = format;
}

void drop_weight_copy(const float* params) {
  Workspace& w = workspace();
  if (w.rounded_of == params) {
    w.rounded_of = nullptr;
    w.rounded_n = 0;
    w.rounded = Vector<float>();
  }
  if (w.weights_of == params) {
    w.weights_of = nullptr;
    w.weights_n = 0;
    w.weights_stale = false;
    w.weights = Kokkos::View<bf16*, MemSpace>();  // freed with its owner (a Pipeline's WeightCopy)
  }
}

ConstMatrix<float> rounded(const ExecSpace& space, Format format, ConstMatrix<float> m, int slot) {
  const std::int64_t n = std::int64_t(m.span());
  if (const float* copy = rounded_weight_copy(m.data(), n, format))  // a weight: rounded once per step
    return ConstMatrix<float>(copy, m.extent(0), m.extent(1));
  float* out = scratch(slot, n);
  round(space, format, m.data(), n, out);
  return ConstMatrix<float>(out, m.extent(0), m.extent(1));
}

}  // namespace gpipe::kernels::reduced

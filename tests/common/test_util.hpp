#pragma once
// Helpers shared by the tests: host <-> device copies and synthetic data.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/core/memory.hpp"
#include "gpipe/core/rng.hpp"
#include "gpipe/core/views.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"

namespace gpipe::test {

/// A device matrix filled from row-major host values.
template <class T>
Matrix<T> to_device(const std::vector<T>& values, std::int64_t rows, std::int64_t cols) {
  Matrix<T> m("test::matrix", rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) h(i, j) = values[size_t(i * cols + j)];
  Kokkos::deep_copy(m, h);
  return m;
}

/// A device label vector from host values.
inline LabelVector labels(const std::vector<std::int32_t>& values) {
  LabelVector v("test::labels", values.size());
  auto h = Kokkos::create_mirror_view(v);
  for (size_t i = 0; i < values.size(); ++i) h(i) = values[i];
  Kokkos::deep_copy(v, h);
  return v;
}

/// Row-major host copy of a device matrix or vector.
template <class ViewT>
std::vector<typename ViewT::non_const_value_type> to_host(const ViewT& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  std::vector<typename ViewT::non_const_value_type> out(h.data(), h.data() + h.span());
  return out;
}

/// Deterministic values in [lo, hi) keyed by (seed, i).
inline std::vector<double> uniform(std::size_t count, std::uint64_t seed, double lo = -1,
                                   double hi = 1) {
  std::vector<double> out(count);
  for (std::size_t i = 0; i < count; ++i)
    out[i] = lo + (hi - lo) * rng::uniform01(rng::hash(seed, 99, i));
  return out;
}

/// A synthetic classification set: `samples` x `features` inputs, labels in [0, classes).
inline Dataset synthetic(std::int64_t samples, std::int64_t features, int classes,
                         std::uint64_t seed) {
  Dataset d;
  d.name = "synthetic";
  d.labels_name = "synthetic";
  d.samples = samples;
  d.features = features;
  const auto x = uniform(size_t(samples * features), seed);
  d.inputs.assign(x.begin(), x.end());
  for (std::int64_t i = 0; i < samples; ++i)
    d.labels.push_back(std::int32_t(rng::hash(seed, 7, std::uint64_t(i)) % std::uint64_t(classes)));
  return d;
}

/// A deck whose data paths are placeholders (tests pass Datasets directly).
inline std::string deck_text(const std::string& layers, std::int64_t input, std::int64_t batch,
                             int micro_batches, const std::string& precision = "double",
                             const std::string& pipeline = "{}",
                             const std::string& optimizer = "{type: adam, lr: 0.01}") {
  return "seed: 7\nprecision: " + precision + "\nmodel:\n  input: " + std::to_string(input) +
         "\n  layers: " + layers +
         "\ndata: {train_images: a, train_labels: b, test_images: c, test_labels: d}"
         "\ntraining: {epochs: 1, batch_size: " +
         std::to_string(batch) + ", micro_batches: " + std::to_string(micro_batches) +
         "}\noptimizer: " + optimizer + "\npipeline: " + pipeline + "\n";
}

/// Bytes of the live tracked allocations (gpipe/core/memory.hpp) that are
/// process-wide, grow-only scratch: the Kokkos backend's own ("Kokkos::",
/// e.g. Kokkos::Serial::scratch_mem, sized by the largest reduction the
/// process has run) and the kernel seam's reduced-precision operands
/// ("gpipe::kernels::reduced::"). Whether an operation grows them depends on
/// what ran before it in the same process (ctest runs the whole unit binary
/// in one process, a --gtest_filter run of one test starts fresh), so a test
/// asserting "allocates nothing" counts their growth apart.
inline std::int64_t process_scratch_bytes() {
  std::int64_t bytes = 0;
  for (const auto& a : memory::live_allocations())
    if (a.label.rfind("Kokkos::", 0) == 0 || a.label.rfind("gpipe::kernels::reduced::", 0) == 0) bytes += a.bytes;
  return bytes;
}

}  // namespace gpipe::test

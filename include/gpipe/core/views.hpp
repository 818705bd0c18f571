#pragma once
// View aliases used across gpipe. All matrices are (rows = samples, cols =
// features), LayoutRight (row-major), in the default execution space's memory
// space.

#include <Kokkos_Core.hpp>

#include <stdexcept>
#include <string>
#include <cstdint>

namespace gpipe {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

/// (rows, cols), row-major, device memory.
template <class T>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
template <class T>
using ConstMatrix = Kokkos::View<const T**, Kokkos::LayoutRight, MemSpace>;
template <class T>
using Vector = Kokkos::View<T*, MemSpace>;
template <class T>
using ConstVector = Kokkos::View<const T*, MemSpace>;

/// Class labels, one per sample.
using LabelVector = Kokkos::View<std::int32_t*, MemSpace>;
using ConstLabelVector = Kokkos::View<const std::int32_t*, MemSpace>;

/// A row-major (rows, cols) matrix viewing memory owned elsewhere (a flat
/// buffer). `data` must hold rows*cols elements in MemSpace.
template <class T>
Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
unmanaged_matrix(T* data, std::int64_t rows, std::int64_t cols) {
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return Unmanaged(data, static_cast<size_t>(rows), static_cast<size_t>(cols));
}

/// The first `rows` rows of a row-major matrix (still row-major, no copy).
template <class ViewT>
auto leading_rows(const ViewT& m, std::int64_t rows) {
  return Kokkos::subview(m, std::make_pair<std::int64_t, std::int64_t>(0, std::int64_t(rows)),
                         Kokkos::ALL);
}

/// The elements of a contiguous row-major matrix as one flat vector, for
/// element-wise kernels (no copy). Every matrix gpipe allocates, and every
/// leading_rows() of one, is contiguous; a strided view (a column subview, a
/// padded layout) is not, and throws std::logic_error (its span() covers
/// elements that are not its own: a flat kernel would read or write them).
template <class ViewT>
Kokkos::View<typename ViewT::value_type*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> flat(
    const ViewT& m) {
  using Flat = Kokkos::View<typename ViewT::value_type*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (!m.span_is_contiguous() || m.span() != m.size())
    throw std::logic_error("gpipe::flat: view '" + std::string(m.label()) + "' is not contiguous (" +
                           std::to_string(m.size()) + " elements in a span of " + std::to_string(m.span()) +
                           ")");
  return Flat(m.data(), m.span());
}

/// One team per row, for kernels that work row by row (reductions over a
/// row, per-row random keys); columns go to the team's threads.
using RowPolicy = Kokkos::TeamPolicy<ExecSpace>;
using RowMember = RowPolicy::member_type;

}  // namespace gpipe

#pragma once
// View aliases used across gpipe. All matrices are (rows = samples, cols =
// features), LayoutRight (row-major), in the default execution space's memory
// space.

#include <Kokkos_Core.hpp>
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
  return {data, static_cast<size_t>(rows), static_cast<size_t>(cols)};
}

/// The first `rows` rows of a row-major matrix (still row-major, no copy).
template <class ViewT>
auto leading_rows(const ViewT& m, std::int64_t rows) {
  return Kokkos::subview(m, std::make_pair<std::int64_t, std::int64_t>(0, std::int64_t(rows)),
                         Kokkos::ALL);
}

}  // namespace gpipe

#pragma once
// Finding NaN and infinite values in device vectors (training.nonfinite,
// checkpoints never written from non-finite weights).

#include <cstdint>

#include "gpipe/core/views.hpp"

namespace gpipe {

/// Index of the first NaN or infinite element of `v` (in the default
/// execution space), or -1 if all are finite. Not collective.
template <class T>
std::int64_t first_nonfinite(const Vector<T>& v);

}  // namespace gpipe

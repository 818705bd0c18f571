#pragma once
// Finding NaN and infinite values in device vectors (training.nonfinite,
// checkpoints never written from non-finite weights).

#include <cstdint>

#include "gpipe/core/views.hpp"

namespace gpipe {

/// Index of the first NaN or infinite element of `v`, or -1 if all are
/// finite: one reduction on the instance `space` (which it fences: the
/// result is on the host). Not collective.
template <class T>
std::int64_t first_nonfinite(const Vector<T>& v, const ExecSpace& space = ExecSpace());

}  // namespace gpipe

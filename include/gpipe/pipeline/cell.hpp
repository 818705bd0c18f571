#pragma once
// The classic name of one rank's part of the pipeline. A rank runs the
// stages (pipeline/stage.hpp) its schedule maps to it through a Runner
// (pipeline/runner.hpp); with one stage per rank (fill_drain, 1f1b,
// zero_bubble) that is one contiguous layer range: GPipe's cell.

#include "gpipe/pipeline/runner.hpp"

namespace gpipe {

/// One rank's stages and their runner (pipeline/runner.hpp).
template <class T>
using Cell = Runner<T>;

}  // namespace gpipe

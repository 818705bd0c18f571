#pragma once
// The output file of gpipe-infer. Layout: docs/file-formats.md, "Predictions".

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

/// Provenance stored with predictions (attributes of the root group).
struct PredictionInfo {
  std::string checkpoint;  ///< the checkpoint the model came from
  std::string input;       ///< FILE:DATASET the inputs came from
  std::string loss;        ///< model.loss: softmax_cross_entropy (logits) or mse/mae/huber (values)
  std::int64_t step = 0;   ///< the checkpoint's optimizer step
};

/// Writes `values` (rows, cols) row-major as dataset `name` (float32 for
/// T = float, float64 for double) into a new HDF5 file `path` (truncated if
/// it exists), with `info` as root attributes; for classification
/// (info.loss softmax_cross_entropy) also "classes" (rows) int32, each row's
/// arg-max. Written by the calling process alone, through `path + ".tmp"`
/// renamed into place. Throws InputError naming the file if it cannot be
/// written.
template <class T>
void write_predictions(const std::string& path, const std::string& name, const std::vector<T>& values,
                       std::int64_t rows, std::int64_t cols, const PredictionInfo& info);

}  // namespace gpipe

#pragma once
// The calibration file of the performance model (gpipe-plan --calibrate,
// --costs): measured seconds of every layer's forward, input-gradient and
// weight-gradient parts at given micro-batch rows. HDF5; the layout is in
// docs/file-formats.md ("Layer cost files").

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

struct CostsTable {
  std::string deck;       ///< the deck the layers came from (for the reader's messages)
  std::string precision;  ///< float | double
  std::string build;      ///< build_description() of the measuring binary
  /// The model's layer types in order: the reader checks them against the deck.
  std::vector<std::string> layer_types;
  struct Row {
    std::int64_t layer = 0;
    std::int64_t rows = 0;  ///< micro-batch rows
    double forward_s = 0, backward_input_s = 0, backward_weights_s = 0;
  };
  std::vector<Row> rows;
};

/// Writes `table` to `path` (through a temporary file, renamed when
/// complete). Throws InputError naming the path when it cannot be written.
void write_costs_file(const std::string& path, const CostsTable& table);

/// Reads a file write_costs_file wrote. Throws InputError naming the path
/// for a missing or unreadable file, another format, a missing dataset, or
/// a row (named by its index, layer and rows) whose layer is outside
/// layer_types, whose rows are < 1, or whose time is not finite or negative.
CostsTable read_costs_file(const std::string& path);

}  // namespace gpipe

#pragma once
// HDF5 checkpoints: parameters and optimizer state stored per layer, so a
// checkpoint written with K cells restarts with any other K.
// Layout and guarantees: docs/file-formats.md, "Checkpoints".

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpipe/layers/factory.hpp"

namespace gpipe {

/// Checkpoint format version this build writes and reads.
constexpr int kCheckpointFormatVersion = 1;

/// Scalars stored as attributes of the file's root group.
struct CheckpointInfo {
  std::int64_t step = 0;            ///< optimizer steps completed
  std::int64_t epoch = 0;           ///< epoch of the next step (0-based)
  std::uint64_t seed = 0;
  std::string precision;            ///< float | double
  std::string optimizer;            ///< optimizer type
  std::int64_t optimizer_steps = 0; ///< the optimizer's own step count (Adam's t)
  std::string deck;                 ///< the deck text, for provenance
};

/// This rank's share: layers [first_layer, first_layer + layer_count) of
/// `model`, their parameters as one host buffer in layer order (each layer's
/// tensors in parameter_specs() order), and optimizer state buffers with the
/// same layout.
template <class T>
struct CheckpointShard {
  int first_layer = 0;
  int layer_count = 0;
  std::vector<T> parameters;
  std::vector<std::pair<std::string, std::vector<T>>> optimizer_state;
  /// The layers' non-trainable state (running statistics) in layer order,
  /// each layer's tensors in LayerShape::state order (Cell::state()).
  std::vector<T> layer_state;
};

/// Writes the checkpoint `path` collectively over `comm` with parallel HDF5:
/// every rank creates every dataset, each rank writes its own layers. Writes
/// go to `path + ".tmp"`, renamed to `path` by rank 0 after all ranks have
/// closed the file. Throws InputError (naming the file) if it cannot be
/// written.
template <class T>
void write_checkpoint(const std::string& path, const ModelSpec& model, const CheckpointInfo& info,
                      const CheckpointShard<T>& shard, MPI_Comm comm);

/// Reads this rank's layers from `path` into `shard` (whose first_layer,
/// layer_count and optimizer_state names must be set; buffers are resized).
/// Collective. Checks the format version, the precision, the optimizer
/// type, the number of layers, each layer's group and each dataset's shape;
/// throws InputError naming the file, the dataset, and the expected and found
/// values. Nothing is written.
template <class T>
CheckpointInfo read_checkpoint(const std::string& path, const ModelSpec& model,
                               const std::string& optimizer, CheckpointShard<T>& shard,
                               MPI_Comm comm);

/// Name of the checkpoint after `step` steps: DIRECTORY/ckpt_000000123.h5.
std::string checkpoint_path(const std::string& directory, std::int64_t step);

/// The complete checkpoint with the highest step in `directory` (".tmp"
/// files are ignored); throws InputError if there is none.
std::string latest_checkpoint(const std::string& directory);

/// Removes the partial checkpoints (ckpt_*.h5.tmp, left by a run killed while
/// writing) in `directory`; returns their paths. Call on one rank, before the
/// run writes checkpoints there. A missing directory holds none.
std::vector<std::string> remove_partial_checkpoints(const std::string& directory);

/// Removes all but the `keep` newest complete checkpoints in `directory`.
void prune_checkpoints(const std::string& directory, int keep);

/// HDF5 group of layer `index`: "/layers/003_dense".
std::string layer_group(std::int64_t index, const std::string& type);

}  // namespace gpipe

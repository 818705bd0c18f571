#pragma once
// HDF5 checkpoints: parameters and optimizer state stored per layer, so a
// checkpoint written with K cells restarts with any other K.
// Layout and guarantees: docs/file-formats.md, "Checkpoints".

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpipe/io/dataset.hpp"
#include "gpipe/layers/factory.hpp"

namespace gpipe {

/// Checkpoint format version this build writes and reads.
constexpr int kCheckpointFormatVersion = 1;

/// Scalars stored as attributes of the file's root group.
struct CheckpointInfo {
  std::int64_t step = 0;            ///< optimizer steps completed
  std::int64_t epoch = 0;           ///< epoch of the next step (0-based)
  std::uint64_t seed = 0;
  /// The stored values' type (the master format): float (also for bf16 and
  /// fp16 runs: their master weights and optimizer state are fp32) | double.
  std::string precision;
  /// The precision policy of the run that wrote it (float | double | bf16 |
  /// fp16; absent in older files: read as `precision`). A run may restart
  /// in another policy with the same master format (docs/design.md, "Mixed
  /// precision").
  std::string run_precision;
  /// fp16's dynamic loss scaler (gpipe/optim/loss_scale.hpp) when written
  /// (absent: scale 0, meaning "start from the deck's training.loss_scale").
  double loss_scale = 0;
  std::int64_t loss_scale_good_steps = 0;
  std::int64_t loss_scale_overflows = 0;
  std::string optimizer;            ///< optimizer type
  std::int64_t optimizer_steps = 0; ///< the optimizer's own step count (Adam's t)
  std::string deck;                 ///< the deck text, for provenance
  /// Input and target normalization the model was trained with (group
  /// /normalization; identity when a checkpoint has none).
  NormalizationStats normalization;
  // Run identity and data position (absent in older files: read as empty / 0).
  std::string run_id;               ///< the run that wrote it (16 hex digits)
  std::int64_t written_ns = 0;      ///< when it was written (Unix time, ns): orders runs
  std::int64_t batch_size = 0;      ///< training.batch_size of the run
  std::int64_t train_samples = 0;   ///< samples in the training set of the run
  std::int64_t epoch_samples = 0;   ///< samples of epoch `epoch` already trained on
  double epoch_loss_sum = 0;        ///< sum of their training losses
  std::int64_t epoch_loss_samples = -1;  ///< samples epoch_loss_sum covers (-1: unknown)
  /// Regression: error moments of the epoch so far (DataPosition::metric_moments)
  /// and the samples they cover (-1: unknown, a file without them).
  std::vector<double> epoch_metric_moments;
  std::int64_t epoch_metric_samples = -1;
  /// Steps of epoch `epoch` so far whose update was skipped
  /// (DataPosition::skipped_steps; 0 in a file without the record).
  std::int64_t epoch_skipped_steps = 0;
};

/// This rank's share: the layers `layers` (global indices, increasing; a
/// rank with several stages holds several ranges) of `model`, their
/// parameters as one host buffer in layer order (each layer's tensors in
/// parameter_specs() order), and optimizer state buffers with the same
/// layout. The file stores every layer on its own, so any partition, stage
/// map and schedule reads what any other wrote.
template <class T>
struct CheckpointShard {
  std::vector<int> layers;
  std::vector<T> parameters;
  std::vector<std::pair<std::string, std::vector<T>>> optimizer_state;
  /// The layers' non-trainable state (running statistics) in layer order,
  /// each layer's tensors in LayerShape::state order (Cell::state()).
  std::vector<T> layer_state;
};

/// Writes the checkpoint `path` collectively over `comm` with parallel HDF5:
/// every rank creates every dataset, each rank writes its own layers. Writes
/// go to `path + ".tmp"`; after all ranks have closed the file they agree on
/// the outcome (one Allreduce of a flag): only if every rank succeeded does
/// rank 0 rename it to `path`, else the .tmp file is removed and every rank
/// throws the first failing rank's InputError (naming the file), so no rank
/// is left waiting and no partial file takes a checkpoint's name.
template <class T>
void write_checkpoint(const std::string& path, const ModelSpec& model, const CheckpointInfo& info,
                      const CheckpointShard<T>& shard, MPI_Comm comm);

/// Reads this rank's layers from `path` into `shard` (whose layers and
/// optimizer_state names must be set; buffers are resized).
/// Collective. Checks the format version, the precision, the optimizer
/// type, the number of layers, each layer's group and each dataset's shape;
/// throws InputError naming the file, the dataset, and the expected and found
/// values. Nothing is written.
template <class T>
CheckpointInfo read_checkpoint(const std::string& path, const ModelSpec& model,
                               const std::string& optimizer, CheckpointShard<T>& shard,
                               MPI_Comm comm);

/// The root attributes (step, precision, the deck text, run id, ...) and the
/// normalization of checkpoint `path`, read by this process alone (not
/// collective): what an inference run needs to rebuild the model. Throws
/// InputError for a missing, unreadable or unsupported file.
CheckpointInfo read_checkpoint_info(const std::string& path);

/// A new run identity: 16 hex digits drawn on rank 0 (clock, process id,
/// std::random_device) and broadcast. Collective.
std::string new_run_id(MPI_Comm comm);

/// Name of run `run`'s checkpoint after `step` steps:
/// DIRECTORY/ckpt_000000123_<run>.h5 (DIRECTORY/ckpt_000000123.h5 if `run`
/// is empty, the name older versions wrote). Runs sharing a directory never
/// write each other's files.
std::string checkpoint_path(const std::string& directory, std::int64_t step,
                            const std::string& run = "");

/// Removes the partial checkpoints (ckpt_*.h5.tmp, left by a run killed while
/// writing) in `directory`; returns their paths. Call on one rank, before the
/// run writes checkpoints there. A missing directory holds none.
std::vector<std::string> remove_partial_checkpoints(const std::string& directory);

/// The checkpoint --restart latest takes, and those it passed over.
struct LatestCheckpoint {
  std::string path;                  ///< the newest usable checkpoint
  CheckpointInfo info;               ///< its header (on rank 0; step on every rank)
  std::vector<std::string> skipped;  ///< "path: reason", newer ones that are damaged or incompatible
};

/// The newest complete, readable checkpoint in `directory` of a run
/// compatible with `model`, `precision` and `optimizer` (same layers and
/// shapes). Newest = latest `written_ns` (file modification time for files
/// without it), then highest step. Candidates are inspected on rank 0 only
/// (header and every dataset's shape; ".tmp" files are ignored) and the
/// choice is broadcast, so all ranks open the same file even when a shared
/// file system shows them different listings. Collective. Throws InputError
/// on every rank if there is none, listing what was skipped and why.
LatestCheckpoint find_latest_checkpoint(const std::string& directory, const ModelSpec& model,
                                        const std::string& precision,
                                        const std::string& optimizer, MPI_Comm comm);

/// The newest complete checkpoint in `directory` whatever its model (for a
/// reader that takes the model from the file, as gpipe-infer does): among
/// ckpt_*.h5 (never .tmp) whose header reads, the latest `written_ns`
/// (modification time for files without it), then the highest step. Read by
/// this process alone (not collective). Throws InputError naming the
/// directory if there is none, listing the files it passed over and why.
std::string newest_checkpoint(const std::string& directory);

/// Removes run `run`'s checkpoints in `directory` except its `keep` (>= 1)
/// highest steps. Files of other runs (other ids, or no id) are never
/// touched, nor the newest checkpoint of `run`. Not collective (call on one rank).
void prune_checkpoints(const std::string& directory, const std::string& run, int keep);

/// "" if this process can create (and replace) files named `path` in its
/// directory, else why not, with the OS's reason (strerror): a probe file is
/// created in the directory and removed; an existing `path` must be
/// writable and no directory. `what` names the option in the message:
/// "WHAT PATH: cannot create files in DIR: REASON". Not collective.
std::string unwritable_file(const std::string& what, const std::string& path);

/// "" if directory `dir` exists or can be created (with its parents), and
/// files can be created in it; else why not, with the OS's reason: "WHAT
/// DIR: exists and is not a directory", "WHAT DIR: cannot create the
/// directory: REASON" or "WHAT DIR/ckpt_probe.h5: cannot create files in
/// DIR: REASON". Also true for root: a read-only file system (EROFS) or a
/// path under a regular file (ENOTDIR) fails. Not collective.
std::string unwritable_directory(const std::string& what, const std::string& dir);

/// The check every entry point (gpipe-train, Driver::fit, the C API's
/// gpipe_create_*) makes before the first step: the checkpoint directory
/// `dir` is writable on every rank of `comm` (parallel HDF5 opens a
/// checkpoint on all of a pipeline's ranks). Collective (agreed): throws
/// AgreedError<InputError> on every rank with the first failing rank's
/// unwritable_directory message and " (rank R)", R its rank in `comm`.
/// `what` names the key ("checkpoint.directory").
void require_writable_directory(const std::string& what, const std::string& dir, MPI_Comm comm);

/// HDF5 group of layer `index`: "/layers/003_dense".
std::string layer_group(std::int64_t index, const std::string& type);

}  // namespace gpipe

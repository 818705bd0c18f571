#pragma once
// The YAML input deck of gpipe-train. Format: docs/input-deck.md.

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/dataset.hpp"
#include "gpipe/layers/factory.hpp"
#include "gpipe/optim/optimizer.hpp"
#include "gpipe/pipeline/schedule.hpp"

namespace gpipe {

/// What a step does when its loss or a gradient is NaN or infinite on any rank
/// (decided collectively, the same on every rank).
enum class NonFinite {
  Abort,     ///< stop with an error naming the step, cell and first layer (default)
  SkipStep,  ///< discard the step's gradients: no update; the step is counted as skipped
  Ignore     ///< apply the update anyway (the results are marked as not finite)
};

struct TrainingSpec {
  std::int64_t epochs = 1;
  std::int64_t batch_size = 128;   ///< mini-batch size N
  int micro_batches = 1;           ///< M
  bool shuffle = true;
  std::int64_t progress_every = 50;  ///< steps between progress lines (0 = none)
  NonFinite nonfinite = NonFinite::Abort;  ///< training.nonfinite
  /// Dynamic loss scaling (precision: fp16 only; docs/design.md "Mixed
  /// precision"): the initial scale S, the factor it grows by after
  /// loss_scale_growth_interval consecutive applied steps, and the factor it
  /// backs off by at a step whose gradients overflowed (that step skipped).
  double loss_scale = 65536.0;                     ///< training.loss_scale
  std::int64_t loss_scale_growth_interval = 2000;  ///< training.loss_scale_growth_interval
  double loss_scale_growth = 2.0;                  ///< training.loss_scale_growth
  double loss_scale_backoff = 0.5;                 ///< training.loss_scale_backoff
};

/// pipeline.link: an emulated slow link between cells (a test and planning
/// facility, docs/design.md "Emulated link"). Off unless bandwidth_gbps > 0.
struct LinkSpec {
  double latency_us = 0;      ///< one-way latency per message, microseconds (>= 0)
  double bandwidth_gbps = 0;  ///< Gb/s (10^9 bits/s) per direction; 0: no emulated link
  bool enabled() const { return bandwidth_gbps > 0; }
};

struct PipelineSpec {
  std::string balance = "params";   ///< params | flops | time | explicit
  std::vector<int> counts;          ///< explicit: layers per stage (K x chunks entries)
  Remat remat = Remat::Never;
  ScheduleKind schedule = ScheduleKind::FillDrain;  ///< training schedule (pipeline.schedule)
  int chunks = 1;                   ///< pipeline.chunks: stages per rank (v; interleaved_1f1b)
  /// pipeline.w_group: micro-batches per W op (group_weights, pipeline/schedule.hpp; 1: one each)
  int w_group = 1;
  /// pipeline.schedule_file: a schedule file (pipeline/schedule_file.hpp)
  /// that replaces `schedule` ("" = none); relative to the working directory.
  std::string schedule_file;
  LinkSpec link;                    ///< pipeline.link (off by default)
  /// pipeline.wait: sleep (true) or spin (false, the default) while a step
  /// waits for MPI (pipeline/wait.hpp, WaitPolicy); bitwise the same results.
  bool wait_sleep = false;
  /// pipeline.memory_budget: device bytes per rank a layout may need (0 =
  /// no limit); written as a byte size ("512MiB", "2GiB"; train/memory.hpp).
  std::int64_t memory_budget = 0;
  /// pipeline.activation_storage: auto (true: bf16 / fp16 runs keep their
  /// activations in 16-bit slots, CellOptions::activation_storage16) or
  /// float (false: float buffers of the same 16-bit values; bitwise the
  /// same results, twice the bytes).
  bool activation_storage16 = true;
  /// pipeline.tf32: float GEMMs and convolutions may use TF32 where the
  /// implementation and GPU have it (cuBLAS, cuDNN on compute capability
  /// >= 8.0; gpipe/kernels/backend.hpp set_tf32); no effect elsewhere (a
  /// note once per process). Not bitwise fp32.
  bool tf32 = false;
};

/// The D x K rank grid (docs/design.md, "Data x pipeline parallelism").
struct ParallelSpec {
  int cells = 0;                         ///< K cells per pipeline (0 = all ranks: D = 1)
  std::string placement = "replica";     ///< replica | pipeline: which ranks are adjacent
  bool deterministic_reduction = false;  ///< fixed-order gradient sum (bitwise reproducible)
  std::int64_t bucket_kib = 256;         ///< gradient all-reduce bucket size, KiB
};

struct CheckpointSpec {
  std::string directory;         ///< where ckpt_*.h5 go ("" = no checkpoints)
  std::int64_t every_steps = 0;  ///< write every n optimizer steps (0 = off)
  std::int64_t every_epochs = 1; ///< write at the end of every n-th epoch (0 = off)
  int keep = 2;                  ///< complete checkpoints kept; older ones are removed
};

struct TraceSpec {
  std::string file;              ///< HDF5 trace file ("" = no trace)
  std::int64_t every = 10;       ///< record every n-th step (>= 1)
};

struct Deck {
  std::string path;                 ///< file the deck came from
  std::string text;                 ///< the deck after --set overrides, as YAML
  std::uint64_t seed = 0;
  std::string precision = "float";  ///< float | double | bf16 | fp16 (gpipe/core/precision.hpp)
  std::string kernels = "auto";     ///< auto | portable | onednn (gpipe/kernels/backend.hpp)
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  OptimizerSpec optimizer;
  PipelineSpec pipeline;
  ParallelSpec parallel;
  CheckpointSpec checkpoint;
  TraceSpec trace;
};

/// Reads and validates the deck at `path`, applying `overrides`
/// ("key=value", key a dotted path such as optimizer.lr; value parsed as
/// YAML). Throws InputError with "path:line:column: field: problem" for YAML
/// syntax errors, unknown or missing keys, wrong types and invalid values,
/// and for an unknown --set key.
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides = {});

/// As load_deck, from YAML text; `name` stands for the file in messages.
Deck parse_deck(const std::string& text, const std::string& name,
                const std::vector<std::string>& overrides = {});

/// As parse_deck and load_deck for a caller that passes the data itself (the
/// C and Fortran APIs, a C++ code calling Pipeline::step): the data section
/// is optional; without one deck.data keeps its defaults (no files, never
/// read). A data section that is there is checked as parse_deck checks it.
Deck parse_model_deck(const std::string& text, const std::string& name,
                      const std::vector<std::string>& overrides = {});
Deck load_model_deck(const std::string& path, const std::vector<std::string>& overrides = {});

/// As parse_deck, for the deck stored in a checkpoint (CheckpointInfo::deck),
/// which an earlier version or another entry point wrote: gpipe-infer and a
/// restart's check of what changed (train/restart.hpp) read it with this.
/// Relaxes exactly two rules of parse_deck, and checks everything else as it
/// does (InputError naming `name`, line and column):
///  - training.loss_scale, training.loss_scale_growth_interval,
///    training.loss_scale_growth and training.loss_scale_backoff with a
///    precision (after `overrides`) that has no loss scaling (float, double,
///    bf16): parse_deck refuses them; here they are dropped unread, their
///    values unchecked (deck.training keeps the defaults, deck.text lacks
///    them). With fp16 they are read and checked as parse_deck does.
///  - the data section is optional, as in parse_model_deck (a checkpoint
///    written through the C API has none): without one deck.data keeps its
///    defaults (empty train_images and train_file).
Deck parse_stored_deck(const std::string& text, const std::string& name,
                       const std::vector<std::string>& overrides = {});

/// Throws InputError if a layer of `model` computes statistics over the
/// micro-batch that are undefined for micro-batches of `rows` rows: a
/// batchnorm2d layer (input [C, H, W]) needs at least 2 values per channel,
/// rows x H x W >= 2 (the variance of one value is 0: the output would be
/// the constant beta and the running variance would decay to 0). The message
/// names the layer, its input, `rows` and `why` (how the rows come about,
/// e.g. "training.micro_batches = 32 micro-batches of a 32-sample batch").
/// parse_deck checks the micro-batches of a full batch on one replica,
/// grid_shape those of a replica's shard, the driver those of the last
/// partial batch.
void check_micro_batch_statistics(const ModelSpec& model, std::int64_t rows, const std::string& why);

/// Keys accepted by --set (dotted paths).
const std::vector<std::string>& settable_keys();

/// The documented domain of a scalar deck key (a dotted path such as
/// "optimizer.lr"), as the parser checks it and docs/input-deck.md lists it:
/// e.g. "a finite number > 0", "an integer >= 0", "a number in [0, 1)",
/// "constant or cosine". Throws InputError for an unknown key.
std::string key_domain(const std::string& key);

/// Parses a byte size: a number and a unit, B, KiB, MiB, GiB, TiB (powers of
/// 1024) or kB, MB, GB, TB (powers of 1000), e.g. "512MiB", "1.5 GiB",
/// "800MB"; a plain integer is bytes. Throws InputError naming `field` for
/// anything else (no unit on a fraction, an unknown unit, a value <= 0).
std::int64_t parse_byte_size(const std::string& text, const std::string& field);

/// "512.0 MiB", "2.00 GiB", "123 B": bytes for messages and tables.
std::string format_bytes(std::int64_t bytes);

}  // namespace gpipe

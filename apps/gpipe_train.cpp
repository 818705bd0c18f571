// gpipe-train: trains the model of a YAML input deck with GPipe pipeline
// parallelism, one cell per MPI rank. See `gpipe-train --help` and README.md.

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <tuple>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "abort_on_error.hpp"
#include "gpipe/core/precision.hpp"
#include "cli.hpp"
#include "partition_table.hpp"
#include "gpipe/config.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/memory.hpp"
#include "gpipe/core/runtime.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/io/trace_file.hpp"
#include "gpipe/layers/registry.hpp"
#include "gpipe/loss/token_cross_entropy.hpp"
#include "gpipe/train/restart.hpp"
#include "gpipe/train/driver.hpp"
#include "gpipe/train/pipeline.hpp"
#include "gpipe/train/memory.hpp"
#include "gpipe/train/plan.hpp"
#include "gpipe/train/stop_signal.hpp"
#include "run_record.hpp"

namespace {

using gpipe::app::kExitInputError;
using gpipe::app::kExitRuntimeError;

struct Options {
  std::string deck;
  std::vector<std::string> sets;
  std::string summary;
  std::string metrics;  // JSON-lines metrics stream, appended
  std::string restart;
  std::string trace;
  bool quiet = false;    // warnings and errors only
  bool verbose = false;  // also debug messages (the run record), with timestamps
  bool check = false;      // validate the deck and print the partition; no MPI, no Kokkos
  int ranks = 1;           // --check: the rank count to partition for
  bool list_keys = false;  // print the deck keys and their domains
  std::vector<std::string> command_line;
};

// Writes `text` to `path` atomically: a temporary file, then rename().
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw gpipe::InputError(fmt::format("{}: cannot write the run summary", path));
    out << text;
    if (!out.flush()) throw gpipe::InputError(fmt::format("{}: writing the run summary failed", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw gpipe::InputError(fmt::format("{}: cannot rename {} into place", path, tmp));
}

// Runs `step` on every rank and agrees on its outcome (gpipe::agreed): if it
// throws on any rank, every rank returns false and only rank 0 prints the
// first failing rank's error, once (no rank is left waiting in a collective
// the failed rank never enters, and no K interleaved copies).
template <class F>
bool on_all_ranks(F&& step) {
  try {
    gpipe::agreed(MPI_COMM_WORLD, step);
    return true;
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::cerr << "gpipe-train: error: " << e.what() << "\n";
    return false;
  }
}

// unwritable_file / unwritable_directory: gpipe/io/checkpoint.hpp (the one
// check Driver::fit and the C API make too).
using gpipe::unwritable_directory;
using gpipe::unwritable_file;

// Before the first step: every output path of the run checked on the ranks
// that write it (summary, metrics stream and trace: rank 0; the checkpoint
// directory: every rank, as parallel HDF5 opens the file on all of a
// pipeline's ranks). Agreed: on failure every rank stops and rank 0 prints the
// first failing rank's reason, with the path.
bool outputs_writable(const gpipe::Deck& deck, const Options& options, int rank) {
  return on_all_ranks([&] {
    std::string error;
    if (rank == 0) {
      if (!options.summary.empty()) error = unwritable_file("--summary", options.summary);
      if (error.empty() && !options.metrics.empty())
        error = unwritable_file("--metrics", options.metrics);
      if (error.empty() && !deck.trace.file.empty())
        error = unwritable_file("trace.file (--trace)", deck.trace.file);
    }
    if (error.empty())
      error = unwritable_directory(
          deck.checkpoint.directory.empty() ? "the working directory (where a stop signal's "
                                              "checkpoint goes)"
                                            : "checkpoint.directory",
          deck.checkpoint.directory.empty() ? std::string(".") : deck.checkpoint.directory);
    if (!error.empty()) throw gpipe::InputError(fmt::format("{} (rank {})", error, rank));
  });
}

// The JSON-lines metrics stream (--metrics, docs/file-formats.md): one
// object per line, appended and flushed at every event, so a reader (a plot,
// `tail -f`) sees the run while it goes and a requeued job continues the
// same file. Rank 0 only.
class MetricsStream {
 public:
  MetricsStream() = default;
  explicit MetricsStream(const std::string& path) : path_(path) {
    if (path.empty()) return;
    // A job killed mid-line left a partial line: start on a new one.
    bool partial = false;
    {
      std::ifstream in(path, std::ios::binary | std::ios::ate);
      if (in && in.tellg() > 0) {
        in.seekg(-1, std::ios::end);
        partial = in.get() != '\n';
      }
    }
    out_.open(path, std::ios::app);
    if (!out_) throw gpipe::InputError(fmt::format("--metrics {}: cannot open it for appending: {}",
                                                   path, std::strerror(errno)));
    if (partial) out_ << "\n";
  }
  void write(nlohmann::json record) {
    if (!out_.is_open()) return;
    record["time"] = gpipe_train::utc_now();
    out_ << record.dump() << "\n" << std::flush;
  }

 private:
  std::string path_;
  std::ofstream out_;
};

// The history entries (summary "history") of run `run_id` for epochs
// 1..completed that earlier jobs of the run wrote: from the summary at
// `summary` (its "history", if its run_id is run_id) and the "epoch" records of
// the metrics stream at `metrics`; a later record of an epoch replaces an
// earlier one. Unreadable files or lines are skipped.
std::map<std::int64_t, nlohmann::json> earlier_history(const std::string& summary,
                                                       const std::string& metrics,
                                                       const std::string& run_id,
                                                       std::int64_t completed) {
  std::map<std::int64_t, nlohmann::json> epochs;
  const auto take = [&](const nlohmann::json& h) {
    if (!h.is_object() || !h.contains("epoch") || !h["epoch"].is_number_integer()) return;
    const auto e = h["epoch"].get<std::int64_t>();
    if (e >= 1 && e <= completed) epochs[e] = h;
  };
  if (!summary.empty()) {
    std::ifstream in(summary);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("run_id", std::string()) == run_id &&
        j.contains("history") && j["history"].is_array())
      for (const auto& h : j["history"]) take(h);
  }
  if (!metrics.empty()) {
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || j.value("event", std::string()) != "epoch" ||
          j.value("run_id", std::string()) != run_id)
        continue;
      auto h = j;
      for (const char* key : {"event", "run_id", "time", "step"}) h.erase(key);
      take(h);
    }
  }
  return epochs;
}

// A figure for the summary: the value, or null when it is not finite.
nlohmann::json figure(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// The M >= 4K rule of thumb (GPipe), as a warning quoting the idle
// fraction of the deck's own schedule (pipeline/schedule.hpp).
void warn_bubble(const gpipe::Deck& deck, int cells) {
  const int M = deck.training.micro_batches;
  const double bubble = gpipe::analytical_bubble(deck, cells);  // NaN: a schedule file
  if (cells > 1 && M < 4 * cells)
    spdlog::warn("training.micro_batches = {} < 4 x {} cells: the pipeline bubble ({}) is not negligible "
                 "(GPipe's rule: M >= 4K)",
                 M, cells,
                 std::isnan(bubble) ? gpipe::schedule_label(deck)
                                    : fmt::format("{} idle fraction {:.2f}", gpipe::schedule_label(deck), bubble));
}

template <class T>
void print_partition(const gpipe::Deck& deck, const gpipe::Pipeline<T>& pipeline,
                     const std::vector<std::int64_t>& bytes, const gpipe::Dataset& train,
                     const gpipe::Dataset& test) {
  const std::string unit = deck.pipeline.balance == "explicit" ? "flops" : deck.pipeline.balance;
  std::vector<std::int64_t> memory;
  for (const auto& c : gpipe::cell_memory(deck, pipeline.partition(), pipeline.grid().replicas, pipeline.grid().cells))
    memory.push_back(c.total());
  gpipe::app::print_partition_table(deck, {pipeline.grid(), pipeline.partition(), pipeline.costs(), unit, bytes,
                                           memory, deck.pipeline.memory_budget});
  fmt::print("  train {} samples ({}), test {} samples\n", train.samples, train.name, test.samples);
  warn_bubble(deck, pipeline.grid().cells);
}

// The deck's data files that cannot be opened ("" if all can), for --check.
std::string unreadable_data(const gpipe::DataSpec& data) {
  const std::vector<std::pair<const char*, const std::string*>> files =
      data.format == "hdf5" || data.format == "tokens"
          ? std::vector<std::pair<const char*, const std::string*>>{{"data.train_file", &data.train_file},
                                                                   {"data.test_file", &data.test_file}}
          : std::vector<std::pair<const char*, const std::string*>>{
                {"data.train_images", &data.train_images}, {"data.train_labels", &data.train_labels},
                {"data.test_images", &data.test_images}, {"data.test_labels", &data.test_labels}};
  for (const auto& [key, path] : files)
    if (!std::ifstream(*path))
      return fmt::format("{}: cannot open {} (missing or unreadable)", *path, key);
  return "";
}

// The deck with the command line's --set and --trace overrides.
gpipe::Deck read_deck(const Options& options) {
  auto sets = options.sets;
  if (!options.trace.empty()) sets.push_back("trace.file=" + options.trace);
  return gpipe::load_deck(options.deck, sets);
}

// --check: the deck and its overrides, the shape pass and the partition for
// options.ranks ranks, printed as a run would print them; neither MPI nor
// Kokkos is started (a login node of a GPU cluster). Data files are only
// checked to be readable.
int check_deck(const Options& options, bool print) {
  gpipe::Deck deck;
  gpipe::RunPlan plan;
  std::string error;
  try {
    deck = read_deck(options);
    // An invalid GPIPE_KERNELS fails the run (Pipeline's constructor): --check says so too.
    if (const std::string env = gpipe::app::environment_error(); !env.empty()) throw gpipe::InputError(env);
    plan = gpipe::plan_run(deck, options.ranks);
    error = unreadable_data(deck.data);
  } catch (const gpipe::InputError& e) {
    error = e.what();
  }
  if (!error.empty()) {
    if (print) std::cerr << "gpipe-train: error: " << error << "\n";
    return kExitInputError;
  }
  std::string over_budget;  // the run would refuse this layout: --check does too, after showing it
  try {
    gpipe::check_memory_budget(plan.memory, deck.pipeline.memory_budget, plan.grid);
  } catch (const gpipe::InputError& e) {
    over_budget = e.what();
  }
  if (!print) return over_budget.empty() ? 0 : kExitInputError;
  std::vector<std::int64_t> memory;
  for (const auto& c : plan.memory) memory.push_back(c.total());
  gpipe::app::print_partition_table(deck, {plan.grid, plan.partition, plan.costs, plan.cost_unit,
                                           plan.activation_bytes, memory, deck.pipeline.memory_budget});
  warn_bubble(deck, plan.grid.cells);
  if (!over_budget.empty()) {
    std::cerr << "gpipe-train: error: " << over_budget << "\n";
    return kExitInputError;
  }
  if (plan.time_balance_approximated)
    fmt::print("  pipeline.balance = time measures every layer when training starts; shown: the "
               "flops partition\n");
  fmt::print("gpipe-train: {}: deck valid for {} ranks (data files readable, not loaded; "
             "neither MPI nor Kokkos started)\n",
             options.deck, options.ranks);
  return 0;
}

// --list-keys: every deck key with its domain, and the layer types with theirs.
void list_keys() {
  fmt::print("Deck keys (docs/input-deck.md), each settable with --set KEY=VALUE:\n");
  for (const auto& key : gpipe::settable_keys())  // pipeline.balance: a word or a list
    fmt::print("  {:<32} {}\n", key,
               key == "pipeline.balance" ? "flops | params | time, or [layers per cell, ...]"
                                         : gpipe::key_domain(key));
  fmt::print("  {:<32} {}\n", "model.input", "the per-sample input shape: [features] or [C, H, W]");
  fmt::print("  {:<32} {}\n", "model.layers", "a list of layers, {type: TYPE, KEY: VALUE, ...}");
  fmt::print("Layer types (model.layers) and their keys besides type:\n");
  for (const auto& type : gpipe::layer_types()) {
    const auto* entry = gpipe::find_layer_entry(type);
    fmt::print("  {:<32} {}\n", type, entry->keys.empty() ? "-" : fmt::format("{}", fmt::join(entry->keys, ", ")));
  }
}

// One epoch of the summary's "history" (and of the metrics stream's "epoch" records).
nlohmann::json history_entry(const gpipe::EpochReport& e, bool regression, bool tokens) {
  nlohmann::json h = {{"epoch", e.epoch},
                      {"train_loss", e.train_loss_finite ? figure(e.train_loss) : nullptr},
                      {"train_samples", e.train_samples},
                      {"train_loss_whole_epoch", e.train_loss_whole_epoch},
                      {"skipped_steps", e.skipped_steps},
                      {"test_loss", figure(e.test.loss)},
                      {"seconds", e.seconds},
                      {"samples_per_second", figure(e.samples_per_second)}};
  if (regression) {
    h["test_rmse"] = figure(e.test.regression.rmse_all);
    h["test_mae"] = figure(e.test.regression.mae_all);
    h["test_r2"] = figure(e.test.regression.r2_all);
    h["train_rmse"] = figure(e.train_metrics.rmse_all);
  } else {
    h["test_accuracy"] = e.test.finite() ? figure(e.test.accuracy) : nullptr;
  }
  if (tokens) {  // a language model: the test loss per token as perplexity and bits
    h["test_perplexity"] = e.test.finite() ? figure(gpipe::token_metrics(e.test.loss).perplexity) : nullptr;
    h["test_bits_per_token"] = e.test.finite() ? figure(gpipe::token_metrics(e.test.loss).bits) : nullptr;
  }
  return h;
}

// The metrics stream's "start" record (docs/file-formats.md) without event,
// run_id and step: the run's layout, the deck's training shape, the load.
template <class T>
nlohmann::json start_event(const gpipe::Deck& deck, const gpipe::Pipeline<T>& pipeline,
                           const nlohmann::json& run, const std::string& restart,
                           std::int64_t completed_epochs) {
  const auto& grid = pipeline.grid();
  return {{"epoch", completed_epochs + 1},
          {"restart", restart.empty() ? nlohmann::json(nullptr) : nlohmann::json(restart)},
          {"deck", deck.path},
          {"ranks", grid.ranks()},
          {"replicas", grid.replicas},
          {"cells", grid.cells},
          {"layout", grid.layout()},
          {"schedule", gpipe::schedule_label(deck)},
          {"micro_batches", deck.training.micro_batches},
          {"batch_size", deck.training.batch_size},
          {"epochs", deck.training.epochs},
          {"loss", deck.model.loss.type},
          {"standardized_targets",
           deck.model.loss.regression() && deck.data.normalize_targets == "standardize"},
          {"slurm_job_id", run["slurm_job_id"]},
          {"machine_load", run["machine_load"]["start"]},
          {"cores", std::thread::hardware_concurrency()}};
}

// A "progress" record of the metrics stream (without event, run_id, step).
nlohmann::json progress_event(const gpipe::ProgressRecord& p) {
  nlohmann::json r = {{"epoch", p.epoch},
                      {"epoch_step", p.epoch_step},
                      {"epoch_steps", p.epoch_steps},
                      {"loss", p.loss_finite ? nlohmann::json(p.loss) : nlohmann::json(nullptr)},
                      {"learning_rate", p.learning_rate},
                      {"samples_per_second", figure(p.samples_per_second)}};
  if (p.regression) r["train_rmse"] = figure(p.train_rmse);
  r["rss_bytes"] = gpipe::memory::rss_bytes();
  r["peak_rss_bytes"] = gpipe::memory::peak_rss_bytes();
  return r;
}

// Regression metrics for the summary: overall and per output, data units.
nlohmann::json metrics_json(const gpipe::RegressionMetrics& m) {
  return {{"rmse", m.rmse_all}, {"mae", m.mae_all}, {"r2", m.r2_all},
          {"rmse_per_output", m.rmse}, {"mae_per_output", m.mae}, {"r2_per_output", m.r2}};
}

// The summary's "memory" (docs/file-formats.md): per rank, the model's
// device bytes (train/memory.hpp) and the measured high-water mark of Kokkos
// allocations in the device memory space (core/memory.hpp; null when a
// Kokkos Tools library owns the callbacks), and the peak RSS. Collective
// over MPI_COMM_WORLD; the result is complete on rank 0.
template <class T>
nlohmann::json memory_report(const gpipe::Deck& deck, const gpipe::Pipeline<T>& pipeline) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const auto cells = gpipe::cell_memory(deck, pipeline.partition(), pipeline.grid().replicas, pipeline.grid().cells);
  const auto& c = cells.at(size_t(pipeline.grid().cell_of(rank)));
  const std::string space = gpipe::memory::device_space_name();
  const long long mine[3] = {gpipe::memory::tracking() ? (long long)gpipe::memory::peak_bytes(space) : -1LL,
                             (long long)gpipe::memory::peak_rss_bytes(), (long long)c.total()};
  std::vector<long long> all(size_t(3 * ranks));
  MPI_Gather(mine, 3, MPI_LONG_LONG, all.data(), 3, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  nlohmann::json j;
  j["device_space"] = space;
  j["budget_bytes"] = deck.pipeline.memory_budget > 0 ? nlohmann::json(deck.pipeline.memory_budget) : nullptr;
  j["predicted_bytes_per_rank"] = nlohmann::json::array();
  j["peak_device_bytes_per_rank"] = nlohmann::json::array();
  j["peak_rss_bytes_per_rank"] = nlohmann::json::array();
  double worst = 0;
  for (int r = 0; r < ranks; ++r) {
    const long long peak = all[size_t(3 * r)], rss = all[size_t(3 * r + 1)], predicted = all[size_t(3 * r + 2)];
    j["predicted_bytes_per_rank"].push_back(predicted);
    j["peak_device_bytes_per_rank"].push_back(peak >= 0 ? nlohmann::json(peak) : nullptr);
    j["peak_rss_bytes_per_rank"].push_back(rss);
    if (peak > 0) worst = std::max(worst, std::abs(double(predicted) - double(peak)) / double(peak));
  }
  j["prediction_error"] = mine[0] >= 0 ? nlohmann::json(worst) : nullptr;
  nlohmann::json terms = nlohmann::json::array();
  for (const auto& m : cells)
    terms.push_back({{"parameters", m.parameters}, {"gradients", m.gradients}, {"layer_state", m.layer_state},
                     {"optimizer", m.optimizer}, {"activations", m.activations},
                     {"gradient_buffers", m.gradient_buffers}, {"workspaces", m.workspaces},
                     {"staging", m.staging}, {"reduction", m.reduction}, {"transient", m.transient},
                     {"weight_copy", m.weight_copy}, {"seam_scratch", m.seam_scratch}, {"total", m.total()}});
  j["predicted_per_cell"] = terms;
  return j;
}

template <class T>
nlohmann::json summary(const gpipe::Deck& deck, const gpipe::Pipeline<T>& pipeline,
                       const std::vector<std::int64_t>& bytes,
                       const std::vector<gpipe::EpochReport>& reports,
                       const gpipe::GatheredTrace& trace, double wall_seconds,
                       const nlohmann::json& run, const gpipe::Dataset& train_set,
                       const gpipe::Dataset& test_set,
                       const std::map<std::int64_t, nlohmann::json>& earlier,
                       const std::vector<std::int64_t>& boundary_bytes,
                       const nlohmann::json& memory) {
  const auto& p = pipeline.partition();
  const int K = pipeline.grid().cells, M = deck.training.micro_batches;
  nlohmann::json j;
  j["version"] = GPIPE_VERSION_STRING;
  j["build"] = gpipe::build_description();
  j["deck"] = deck.path;
  const auto& grid = pipeline.grid();
  j["ranks"] = grid.ranks();
  j["replicas"] = grid.replicas;
  j["cells"] = K;
  j["placement"] = gpipe::to_string(grid.placement);
  j["layout"] = grid.layout();
  j["deterministic_reduction"] = deck.parallel.deterministic_reduction;
  j["precision"] = deck.precision;
  j["epochs"] = deck.training.epochs;
  j["batch_size"] = deck.training.batch_size;
  j["micro_batches"] = M;
  j["remat"] = gpipe::remat_label(deck);
  j["schedule"] = gpipe::schedule_label(deck);
  j["partition"] = p.counts;
  j["imbalance"] = p.imbalance(pipeline.costs());
  j["bubble_fraction_analytical"] = gpipe::analytical_bubble(deck, K);
  if (!deck.trace.file.empty()) {
    j["bubble_fraction_measured"] = trace.measured_bubble();
    j["trace"] = deck.trace.file;
    const auto c = trace.communication();
    j["communication"] = {{"pipeline_seconds_per_step", c.pipeline_seconds},
                          {"data_parallel_seconds_per_step", c.data_parallel_seconds},
                          {"allreduce_seconds_per_step", c.allreduce_seconds},
                          {"allreduce_overlap_fraction", c.overlap_fraction}};
    if (deck.pipeline.link.enabled())
      j["communication"]["link"] = {{"wire_seconds_per_step", c.link_wire_seconds},
                                    {"link_wait_seconds_per_step", c.link_wait_seconds},
                                    {"overlap_fraction", c.link_overlap_fraction}};
  }
  if (deck.pipeline.link.enabled())
    j["link"] = {{"latency_us", deck.pipeline.link.latency_us},
                 {"bandwidth_gbps", deck.pipeline.link.bandwidth_gbps}};
  j["activation_bytes_per_cell"] = bytes;
  // Mixed precision (docs/design.md): the policy's formats, the wire bytes
  // each cell sent in the last step (bf16 / fp16: exactly half of float's)
  // and fp16's loss scaler.
  {
    const gpipe::Precision& pr = pipeline.precision();
    j["precision_policy"] = {{"compute", gpipe::name(pr.compute)}, {"accumulate", gpipe::name(pr.accumulate)},
                             {"master", gpipe::name(pr.master)}, {"wire", gpipe::name(pr.wire)}};
    j["boundary_bytes_per_step"] = boundary_bytes;
    if (pr.loss_scaling) {
      j["loss_scale"] = pipeline.loss_scaler().scale();
      j["loss_scale_overflows"] = pipeline.loss_scaler().overflows();
    }
  }
  j["memory"] = memory;
  // The samples each epoch trains (a last batch smaller than D x M is not).
  j["train_samples"] = train_set.samples - pipeline.untrained_per_epoch(train_set.samples);
  j["untrained_samples_per_epoch"] = pipeline.untrained_per_epoch(train_set.samples);
  j["test_samples"] = test_set.samples;
  j["run"] = run;
  j["run_id"] = pipeline.run_id();
  j["machine_load"] = run["machine_load"];
  const bool regression = deck.model.loss.regression();
  // Every epoch of the run: earlier jobs' (a restart or requeue), then this job's.
  auto epochs = earlier;
  for (const auto& e : reports) epochs[e.epoch] = history_entry(e, regression, deck.model.loss.tokens());
  j["history"] = nlohmann::json::array();
  for (const auto& [epoch, h] : epochs) j["history"].push_back(h);
  j["epochs_this_job"] = reports.size();
  j["loss"] = deck.model.loss.type;
  j["wall_seconds"] = wall_seconds;
  if (reports.empty()) return j;  // stopped by a signal in the first epoch of this run
  const auto& r = reports.back();
  // Figures computed from non-finite values are null, never numbers.
  if (regression) {
    j["test_metrics"] = metrics_json(r.test.regression);
    j["train_metrics"] = metrics_json(r.train_metrics);
  } else {
    j["test_accuracy"] = r.test.finite() ? figure(r.test.accuracy) : nullptr;
  }
  if (deck.model.loss.tokens()) {  // the loss is per token (nats)
    const auto m = gpipe::token_metrics(r.test.loss), t = gpipe::token_metrics(r.train_loss);
    j["test_perplexity"] = r.test.finite() ? figure(m.perplexity) : nullptr;
    j["test_bits_per_token"] = r.test.finite() ? figure(m.bits) : nullptr;
    j["train_perplexity"] = r.train_loss_finite ? figure(t.perplexity) : nullptr;
    j["train_bits_per_token"] = r.train_loss_finite ? figure(t.bits) : nullptr;
    j["tokens_per_sample"] = deck.model.labels_per_sample();
  }
  j["test_loss"] = figure(r.test.loss);
  j["train_loss"] = r.train_loss_finite ? figure(r.train_loss) : nullptr;
  j["train_loss_whole_epoch"] = r.train_loss_whole_epoch;
  j["finite"] = true;
  j["skipped_steps"] = pipeline.skipped_steps();
  double train_seconds = 0, samples = 0;
  for (const auto& e : reports) {
    train_seconds += e.seconds;
    samples += e.samples_per_second * e.seconds;
    if (!e.train_loss_finite || !e.test.finite()) j["finite"] = false;
  }
  j["samples_per_second"] = train_seconds > 0 ? figure(samples / train_seconds) : nullptr;
  j["wall_seconds"] = wall_seconds;
  return j;
}

template <class T>
int train(const gpipe::Deck& deck, const Options& options, int rank, int ranks) {
  const bool root = rank == 0;
  // Every output path, before the data is read and the first step taken.
  if (!outputs_writable(deck, options, rank)) return kExitInputError;
  std::unique_ptr<gpipe::Pipeline<T>> pipeline;
  gpipe::Dataset train_set, test_set;
  gpipe::NormalizationStats stats;
  // Set-up, in two agreed phases: the partition and the data; then a restart.
  const bool ready = on_all_ranks([&] {
    pipeline = std::make_unique<gpipe::Pipeline<T>>(deck, MPI_COMM_WORLD);
    // The first cell of every replica reads the inputs, the last its labels.
    const bool first = pipeline->cell().is_first(), last = pipeline->cell().is_last();
    std::tie(train_set, test_set) = gpipe::load_train_test(deck.data, first, &stats);
    if (first && train_set.features != deck.model.input_features)
      throw gpipe::InputError(fmt::format("{}: samples have {} features but model.input is {}",
                                          train_set.name, train_set.features,
                                          deck.model.input_features));
    if (last && !deck.model.loss.regression()) {
      gpipe::check_labels(train_set, deck.model.vocabulary());
      gpipe::check_labels(test_set, deck.model.vocabulary());
    }
    if (last && deck.model.loss.regression() && train_set.outputs != deck.model.classes())
      throw gpipe::InputError(fmt::format("{}: {} targets per sample but the model's last layer has "
                                          "{} outputs",
                                          train_set.labels_name, train_set.outputs,
                                          deck.model.classes()));
    if (train_set.samples < deck.training.batch_size)
      throw gpipe::InputError(fmt::format("{}: {} training samples, fewer than training.batch_size = {}",
                                          train_set.labels_name, train_set.samples,
                                          deck.training.batch_size));
  });
  if (!ready) return kExitInputError;
  pipeline->set_normalization(stats);  // stored in checkpoints, used by predict and gpipe-infer
  // A restart: `latest` (checkpoint.directory) or a directory given is
  // resolved to its newest usable checkpoint on rank 0 and broadcast (a
  // shared file system may show ranks different listings); it resumes by
  // samples seen.
  std::string restart_path = options.restart;
  std::error_code is_dir_error;
  const bool restart_directory =
      !options.restart.empty() && options.restart != "latest" &&
      std::filesystem::is_directory(options.restart, is_dir_error);
  if ((options.restart == "latest" || restart_directory) && !on_all_ranks([&] {
        const std::string directory =
            restart_directory ? options.restart
            : deck.checkpoint.directory.empty() ? std::string(".") : deck.checkpoint.directory;
        const auto latest = gpipe::find_latest_checkpoint(directory, deck.model, deck.precision,
                                                          deck.optimizer.type, MPI_COMM_WORLD);
        restart_path = latest.path;
        if (root)
          for (const auto& s : latest.skipped)
            spdlog::warn("--restart {}: skipped {}", options.restart, s);
      }))
    return kExitInputError;
  if (!restart_path.empty() && !on_all_ranks([&] {
        const auto info = pipeline->load_checkpoint(restart_path);
        std::vector<std::string> changed;
        std::string skipped_check;
        const auto position =
            gpipe::restart_position(info, restart_path, deck, train_set.samples, &changed, &skipped_check);
        pipeline->set_position(position);
        if (root) {
          fmt::print("gpipe-train: restarting from {} (run {}, step {}, epoch {}, {} of its "
                     "samples trained)\n",
                     restart_path, info.run_id.empty() ? "unknown" : info.run_id, info.step,
                     position.epoch + 1, position.epoch_samples);
          if (!skipped_check.empty()) spdlog::warn("{}", skipped_check);
          if (!changed.empty())
            spdlog::warn("the deck changed {} since {} was written; resuming at the start of "
                         "epoch {}",
                         fmt::join(changed, ", "), restart_path, position.epoch + 1);
        }
      }))
    return kExitInputError;

  const auto bytes = pipeline->gather_activation_bytes();
  if (root && !options.quiet) print_partition(deck, *pipeline, bytes, train_set, test_set);
  if (const std::string note = gpipe::w_group_note(deck); root && !note.empty()) spdlog::warn("{}", note);
  if (root && deck.data.train_limit > train_set.samples)
    spdlog::warn("data.train_limit = {} but {} holds {} samples: training on {} (a weak-scaling "
                 "study would not do the same steps per K)",
                 deck.data.train_limit, train_set.name, train_set.samples, train_set.samples);
  // Partial checkpoints (*.tmp) of an earlier run killed while writing: removed before this run
  // writes any. A signal-forced checkpoint without checkpoint.directory goes to ".".
  const std::string ckpt_dir = deck.checkpoint.directory.empty() ? "." : deck.checkpoint.directory;
  if (root)
    for (const auto& stale : gpipe::remove_partial_checkpoints(ckpt_dir))
      spdlog::info("removed the partial checkpoint {} of an earlier run", stale);

  nlohmann::json run;
  {
    const auto hosts = gpipe_train::sample_hosts(MPI_COMM_WORLD);
    if (root) {
      run = gpipe_train::start_record(deck, options.command_line, hosts, ranks);
      // Logical CPUs of rank 0's host: a load above them means the run shared its cores.
      run["machine_load"]["cores"] = std::thread::hardware_concurrency();
      spdlog::debug("run record: {}", run.dump());
    }
  }
  // Earlier jobs of this run (a restart): their epochs stay in the summary.
  const std::int64_t completed = pipeline->position().epoch;
  std::map<std::int64_t, nlohmann::json> earlier;
  if (root && !restart_path.empty())
    earlier = earlier_history(options.summary, options.metrics, pipeline->run_id(), completed);
  const bool regression = deck.model.loss.regression();
  MetricsStream metrics;
  if (!on_all_ranks([&] {
        if (root) metrics = MetricsStream(options.metrics);
      }))
    return kExitInputError;
  const auto record = [&](const char* event, nlohmann::json r) {
    r["event"] = event;
    r["run_id"] = pipeline->run_id();
    r["step"] = pipeline->steps_done();
    return r;
  };
  if (root) metrics.write(record("start", start_event(deck, *pipeline, run, restart_path, completed)));
  int stopped_by = 0;
  // Fault injection for tests: GPIPE_FAULT_SIGNAL_AT_STEP=S makes the last rank send itself
  // SIGTERM once S steps are done, as a batch system would (deterministically mid-epoch).
  const char* fault = std::getenv("GPIPE_FAULT_SIGNAL_AT_STEP");
  const std::int64_t fault_step = fault ? std::atoll(fault) : -1;
  const auto stop = [&] {
    if (rank == ranks - 1 && pipeline->steps_done() == fault_step) gpipe::raise_stop_signal(SIGTERM);
    return (stopped_by = gpipe::stop_agreed(MPI_COMM_WORLD)) != 0;
  };
  const double start = MPI_Wtime();
  gpipe::Driver<T> driver(*pipeline, root && !options.quiet ? &std::cout : nullptr);
  driver.set_stop(stop);
  if (root) {
    driver.set_progress(
        [&](const gpipe::ProgressRecord& p) { metrics.write(record("progress", progress_event(p))); });
    driver.set_epoch_done([&](const gpipe::EpochReport& e) {
      metrics.write(record("epoch", history_entry(e, regression, deck.model.loss.tokens())));
    });
  }
  const auto reports = driver.fit(train_set, test_set);
  const double seconds = MPI_Wtime() - start;
  {
    const auto hosts = gpipe_train::sample_hosts(MPI_COMM_WORLD);
    if (root) gpipe_train::finish_record(run, hosts);
  }
  if (root && stopped_by != 0) {
    run["stopped"] = {{"signal", gpipe::signal_name(stopped_by)},
                      {"step", pipeline->steps_done()},
                      {"checkpoint", gpipe::checkpoint_path(ckpt_dir, pipeline->steps_done(), pipeline->run_id())}};
    metrics.write(record("stop", {{"signal", run["stopped"]["signal"]},
                                  {"checkpoint", run["stopped"]["checkpoint"]}}));
  } else if (root) {
    metrics.write(record("end", {{"epochs_this_job", reports.size()}}));
  }
  if (root && pipeline->skipped_steps() > 0)
    spdlog::warn("{} steps were skipped for {}", pipeline->skipped_steps(), gpipe::skipped_steps_reason(deck));

  const auto trace = gpipe::gather_trace(pipeline->tracer(), MPI_COMM_WORLD);
  const nlohmann::json memory = memory_report(deck, *pipeline);
  if (root && !options.quiet) {
    long long peak = 0, predicted = 0, rss = 0;
    for (const auto& b : memory["peak_device_bytes_per_rank"]) peak = std::max(peak, b.is_null() ? 0LL : b.get<long long>());
    for (const auto& b : memory["predicted_bytes_per_rank"]) predicted = std::max(predicted, b.get<long long>());
    for (const auto& b : memory["peak_rss_bytes_per_rank"]) rss = std::max(rss, b.get<long long>());
    fmt::print("memory per rank (largest): predicted {} ({} bytes), measured peak {} ({} bytes) in {} space, peak "
               "RSS {}\n",
               gpipe::format_bytes(predicted), predicted, memory["peak_device_bytes_per_rank"][0].is_null() ? "n/a" : gpipe::format_bytes(peak), peak,
               std::string(memory["device_space"]), gpipe::format_bytes(rss));
  }
  if (root && !deck.trace.file.empty()) {
    gpipe::TraceHeader header;
    header.ranks = ranks;
    header.replicas = pipeline->grid().replicas;
    header.cells = pipeline->grid().cells;
    header.placement = gpipe::to_string(pipeline->grid().placement);
    header.micro_batches = deck.training.micro_batches;
    header.batch_size = deck.training.batch_size;
    header.remat = gpipe::remat_label(deck);
    header.schedule = gpipe::schedule_label(deck);
    header.deck = deck.path;
    header.bubble_fraction_analytical =
        gpipe::analytical_bubble(deck, header.cells);
    header.run_record = run.dump();
    gpipe::write_trace_file(deck.trace.file, header, trace);
    if (!options.quiet)
      fmt::print("trace written to {} (measured bubble {:.3f}, analytical {})\n", deck.trace.file,
                 trace.measured_bubble(),
                 std::isnan(header.bubble_fraction_analytical)
                     ? std::string("none: a schedule file")
                     : fmt::format("{:.3f}", header.bubble_fraction_analytical));
  }
  const auto boundary = pipeline->gather_boundary_bytes();  // collective: every rank
  if (stopped_by != 0) {
    if (root && !options.summary.empty())
      write_atomically(options.summary, summary(deck, *pipeline, bytes, reports, trace, seconds, run,
                                                train_set, test_set, earlier, boundary, memory).dump(2) + "\n");
    if (root)
      std::cerr << fmt::format("gpipe-train: stopped by {} after step {}: checkpoint {} written; "
                               "continue with --restart latest (exit status {})\n",
                               gpipe::signal_name(stopped_by), pipeline->steps_done(),
                               gpipe::checkpoint_path(ckpt_dir, pipeline->steps_done(), pipeline->run_id()),
                               gpipe::kExitStoppedBySignal);
    return gpipe::kExitStoppedBySignal;
  }
  if (reports.empty()) {
    if (root) fmt::print("gpipe-train: nothing to train: the checkpoint is already at the last epoch\n");
    return 0;
  }
  if (root && !options.summary.empty()) {
    write_atomically(options.summary, summary(deck, *pipeline, bytes, reports, trace, seconds, run,
                                              train_set, test_set, earlier, boundary, memory).dump(2) + "\n");
    if (!options.quiet) fmt::print("summary written to {}\n", options.summary);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  options.command_line.assign(argv, argv + argc);  // before Kokkos takes its options out
  // Options are parsed before MPI and Kokkos start: --help, --version,
  // --list-keys and --check never start them (a CUDA build on a login node).
  const bool print = gpipe::app::launcher_rank() == 0;
  spdlog::set_pattern("gpipe-train: %l: %v");

  CLI::App app{
      "Train a neural network with GPipe pipeline parallelism: the model of DECK is split into "
      "one cell per MPI rank; each mini-batch streams through the cells as micro-batches.\n\n"
      "  mpirun -n 2 gpipe-train inputs/fashion_mnist_mlp.yaml\n"
      "  gpipe-train deck.yaml --set training.epochs=1 --set optimizer.lr=3e-4 --summary run.json\n"
      "  gpipe-train deck.yaml --check --ranks 4      (validate and show the partition; no GPU needed)",
      "gpipe-train"};
  app.add_option("deck", options.deck, "YAML input deck (model, data, training, optimizer, pipeline)");
  app.add_option("--set", options.sets,
                 "Override a deck value, KEY=VALUE with KEY a dotted path (e.g. training.epochs=2, "
                 "pipeline.remat=always); repeatable")
      ->type_name("KEY=VALUE");
  app.add_option("--summary", options.summary,
                 "Write a JSON run summary (test_accuracy, train_loss, samples_per_second, epochs, "
                 "ranks, partition, every epoch's metrics of the run, earlier jobs' included after "
                 "a restart, ...) to this path when training completes or a stop signal ends it");
  app.add_option("--metrics", options.metrics,
                 "Append a JSON-lines metrics stream to this path: a record at the start, at every "
                 "progress line (step, epoch, loss, learning rate, samples/s, memory), after every "
                 "epoch and at the end (docs/file-formats.md; scripts/plot_training.py reads it, "
                 "also while the run goes)")
      ->type_name("PATH.jsonl");
  app.add_option("--restart", options.restart,
                 "Restart from a checkpoint: a ckpt_*.h5 path, a directory (its newest usable "
                 "checkpoint), or 'latest' (the newest usable one in checkpoint.directory); it may "
                 "have been written with another number of ranks")
      ->type_name("PATH|DIR|latest");
  app.add_option("--trace", options.trace,
                 "Record a timeline of every trace.every-th step on every rank into this HDF5 file "
                 "(same as --set trace.file=PATH)")
      ->type_name("PATH.h5");
  auto* quiet = app.add_flag("-q,--quiet", options.quiet,
                             "Print warnings and errors only (no partition, progress or epoch lines)");
  app.add_flag("-v,--verbose", options.verbose,
               "Also print debug messages (the run record), with timestamps")
      ->excludes(quiet);
  auto* check = app.add_flag("--check", options.check,
                             "Validate DECK (with --set) without training: parse it, run the shape "
                             "pass, check the data files are readable and print the partition for "
                             "--ranks ranks; exit 0, or 2 with the error. Starts neither MPI nor "
                             "Kokkos (works on a login node without a GPU)");
  app.add_option("--ranks", options.ranks, "With --check: the number of MPI ranks to partition for")
      ->check(CLI::PositiveNumber)
      ->needs(check)
      ->capture_default_str();
  app.add_flag("--list-keys", options.list_keys,
               "Print every deck key with its allowed values, and the layer types with their keys");
  app.set_version_flag("--version", [] { return gpipe::build_description(); });
  app.footer(
      "Deck keys: docs/input-deck.md documents every key of the YAML deck (installed as "
      GPIPE_DOCS_DIR "/input-deck.md); --list-keys prints them with their allowed values. Output "
      "files (summary, metrics stream, checkpoints, trace): docs/file-formats.md.\n\n"
      "Keys most runs --set:\n"
      "  precision=float|double|bf16|fp16   bf16/fp16: fp32 master weights, 16-bit GEMM operands and messages;\n"
      "                                     fp16 adds dynamic loss scaling (training.loss_scale*, fp16 only)\n"
      "  pipeline.schedule=fill_drain|1f1b|zero_bubble|interleaved_1f1b|zb_v|dualpipe_v\n"
      "                                     interleaved_1f1b takes pipeline.chunks=V (V stages per rank);\n"
      "                                     zb_v and dualpipe_v run two stages per rank\n"
      "  pipeline.schedule_file=FILE        a schedule file (gpipe-plan DECK --print or --tune writes one)\n"
      "  pipeline.remat=never|always|except_last, training.micro_batches=M, parallel.cells=K\n\n"
      "Environment:\n"
      "  GPIPE_KERNELS=auto|portable|onednn (cublas, cudnn in CUDA builds)  overrides the deck's kernels\n"
      "                                     (an invalid value is an error; --version shows what each primitive runs)\n"
      "  OPENBLAS_NUM_THREADS=1             one BLAS thread per rank (one rank per core)\n\n" +
      gpipe::app::kokkos_options_help());
  // Kokkos consumes the --kokkos-* options it knows; let other Kokkos
  // versions' options through rather than reject them.
  app.allow_extras();
  try {
    app.parse(argc, argv);
    for (const auto& extra : app.remaining())
      if (extra.rfind("--kokkos", 0) != 0) throw CLI::ExtrasError({extra});
    if (options.deck.empty() && !options.list_keys) throw CLI::RequiredError("deck");
  } catch (const CLI::ParseError& e) {
    const int status = (print ? app.exit(e) : e.get_exit_code()) == 0 ? 0 : kExitInputError;
    // --version with an invalid GPIPE_KERNELS: the build is printed, the status says the run would fail
    if (status == 0 && dynamic_cast<const CLI::CallForVersion*>(&e)) return gpipe::app::version_status("gpipe-train", print);
    return status;
  }
  if (options.list_keys) {
    if (print) list_keys();
    return 0;
  }
  if (options.check) return check_deck(options, print);

  const auto runtime = gpipe::app::start_runtime("gpipe-train", argc, argv);
  if (!runtime) return kExitRuntimeError;
  // Device memory high-water mark for the summary, unless a Kokkos Tools
  // library owns the allocation callbacks (core/memory.hpp).
  if (!std::getenv("KOKKOS_PROFILE_LIBRARY") && !std::getenv("KOKKOS_TOOLS_LIBS")) gpipe::memory::start_tracking();
  gpipe::install_stop_handlers();  // SIGTERM / SIGUSR1: finish the step, checkpoint, exit 75
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  spdlog::set_level(options.quiet ? spdlog::level::warn
                                  : options.verbose ? spdlog::level::debug : spdlog::level::info);
  if (options.verbose) spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] gpipe-train: %l: %v");
  gpipe::Deck deck;
  std::string error;
  try {
    deck = read_deck(options);
  } catch (const gpipe::InputError& e) {
    error = e.what();
  }
  // Agreed: a deck that one rank cannot read stops every rank; rank 0 prints
  // the first failing rank's message once.
  const gpipe::Agreement deck_read = gpipe::agree(error.empty() ? 0 : 1, error, MPI_COMM_WORLD);
  if (deck_read.failed) {
    if (rank == 0) std::cerr << "gpipe-train: error: " << deck_read.message << "\n";
    return kExitInputError;
  }
  return gpipe::app::abort_on_error("gpipe-train", rank, [&] {
    return gpipe::with_scalar(deck.precision, [&](auto t) { return train<decltype(t)>(deck, options, rank, ranks); });
  });
}

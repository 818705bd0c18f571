// gpipe-infer: predictions of a trained model (a gpipe checkpoint) for the
// inputs in an HDF5 file, pipelined over the MPI ranks and micro-batched as
// the training deck (stored in the checkpoint) says. See docs/inference.md.

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <spdlog/spdlog.h>

#include "abort_on_error.hpp"
#include "gpipe/core/precision.hpp"
#include "cli.hpp"
#include "gpipe/config.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/rng.hpp"
#include "gpipe/core/runtime.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/train/plan.hpp"
#include "gpipe/io/predictions.hpp"
#include "gpipe/train/pipeline.hpp"

namespace {

using gpipe::app::kExitInputError;

struct Options {
  std::string checkpoint, input, output;
  std::string inputs_dataset = "inputs", output_dataset = "predictions";
  int cells = 0;
  std::int64_t batch_size = 0;
  int micro_batches = 0;
  // --generate (a language model): prompt, continuation length, sampling.
  std::string generate, vocabulary;
  bool generating = false;
  std::int64_t tokens = 200;
  double temperature = 1.0;  // 0: greedy
  std::int64_t top_k = 0;    // 0: the whole vocabulary
  std::uint64_t seed = 1;
};

// Runs `step` on every rank and agrees on its outcome (gpipe::agreed): if it
// throws InputError on any rank, every rank returns false and rank 0 prints
// the first failing rank's error once (no rank waits in a collective another
// never enters, and no copy per rank). Other errors propagate (abort_on_error).
template <class F>
bool on_all_ranks(int rank, F&& step) {
  try {
    gpipe::agreed(MPI_COMM_WORLD, step);
    return true;
  } catch (const gpipe::InputError& e) {
    if (rank == 0) std::cerr << "gpipe-infer: error: " << e.what() << "\n";
    return false;
  }
}

// A checkpoint directory becomes its newest complete checkpoint, chosen on
// rank 0 and broadcast (a shared file system may show ranks different
// listings); a file stays as it is. Collective.
std::string resolve_checkpoint(const std::string& given, int rank) {
  std::error_code ec;
  if (!std::filesystem::is_directory(given, ec)) return given;
  std::string path;
  gpipe::agreed(MPI_COMM_WORLD, [&] {
    if (rank == 0) path = gpipe::newest_checkpoint(given);
  });
  int size = int(path.size());
  MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path.resize(std::size_t(size));
  MPI_Bcast(path.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) fmt::print("gpipe-infer: {}: its newest checkpoint is {}\n", given, path);
  return path;
}

template <class T>
int infer(const gpipe::Deck& deck, const gpipe::CheckpointInfo& info, const Options& o, int rank) {
  std::unique_ptr<gpipe::Pipeline<T>> pipeline;
  gpipe::Dataset data;
  if (!on_all_ranks(rank, [&] {
        pipeline = std::make_unique<gpipe::Pipeline<T>>(deck, MPI_COMM_WORLD);
        // Every rank reads the inputs (only the first cells use them).
        data = gpipe::load_hdf5_inputs(o.input, o.inputs_dataset);
        if (data.features != deck.model.input_features)
          throw gpipe::InputError(fmt::format("{}: samples have {} features but the model takes {}",
                                              data.name, data.features, deck.model.input_features));
      }))
    return kExitInputError;
  if (!on_all_ranks(rank, [&] { pipeline->load_checkpoint(o.checkpoint); })) return kExitInputError;
  const double start = MPI_Wtime();
  const std::vector<T> out = pipeline->predict(data.inputs.data(), data.samples);
  const double seconds = MPI_Wtime() - start;
  const std::int64_t outputs = deck.model.classes();
  if (!on_all_ranks(rank, [&] {
        if (rank != 0) return;
        gpipe::PredictionInfo p{o.checkpoint, data.name, deck.model.loss.type, info.step};
        gpipe::write_predictions(o.output, o.output_dataset, out, data.samples, outputs, p);
      }))
    return kExitInputError;
  if (rank == 0)
    fmt::print("gpipe-infer: {} samples x {} outputs ({}) from {} on {} ranks ({} replicas x {} "
               "cells), {:.3f} s; written to {}:{}\n",
               data.samples, outputs, deck.model.loss.type, o.checkpoint,
               pipeline->grid().ranks(), pipeline->grid().replicas, pipeline->grid().cells, seconds,
               o.output, o.output_dataset);
  return 0;
}

// The id of the next token from one token's logits (V): the arg-max when
// temperature is 0 (greedy; the first maximum), else a draw from softmax(z /
// temperature) restricted to the top_k largest logits (0: all), with a
// uniform from the counter-based hash of (seed, position): the same draw on
// every rank, at any K, on every platform.
template <class T>
std::int64_t next_token(const T* z, std::int64_t V, const Options& o, std::int64_t position) {
  std::vector<std::int64_t> ids(static_cast<size_t>(V));
  for (std::int64_t v = 0; v < V; ++v) ids[size_t(v)] = v;
  std::stable_sort(ids.begin(), ids.end(), [&](std::int64_t a, std::int64_t b) { return z[a] > z[b]; });
  if (o.temperature == 0) return ids[0];
  const auto k = size_t(o.top_k > 0 ? std::min(o.top_k, V) : V);
  std::vector<double> p(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((double(z[ids[i]]) - double(z[ids[0]])) / o.temperature);
  const double u = gpipe::rng::uniform01(gpipe::rng::hash(o.seed, 0x6e657874ULL, std::uint64_t(position))) * sum;
  double acc = 0;
  for (size_t i = 0; i < k; ++i)
    if ((acc += p[i]) > u) return ids[i];
  return ids[k - 1];
}

// --generate: the prompt's characters as ids, then o.tokens continuations,
// each from one predict() of the last T ids (left-aligned, the unused tail
// filled with id 0, which causal attention never lets an earlier position
// see) and the logits of the last real position. Collective.
template <class T>
int generate_text(const gpipe::Deck& deck, const Options& o, int rank) {
  std::unique_ptr<gpipe::Pipeline<T>> pipeline;
  std::string vocabulary;
  std::vector<std::int64_t> ids;
  const std::int64_t context = deck.model.input_features;
  if (!on_all_ranks(rank, [&] {
        if (!deck.model.loss.tokens())
          throw gpipe::InputError(fmt::format("--generate: {} is not a language model (model.loss is {}, "
                                              "expected token_cross_entropy)",
                                              o.checkpoint, deck.model.loss.type));
        if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
          throw gpipe::InputError(fmt::format("--temperature: expected a finite number >= 0, got {}", o.temperature));
        if (o.tokens < 0 || o.top_k < 0)
          throw gpipe::InputError("--tokens and --top-k: expected integers >= 0");
        const std::string file = o.vocabulary.empty() ? deck.data.train_file : o.vocabulary;
        if (file.empty())  // a stored deck without a data section (a C API run's checkpoint)
          throw gpipe::InputError(fmt::format("--generate: the deck in {} has no data.train_file to take the "
                                              "vocabulary from; give --vocabulary FILE",
                                              o.checkpoint));
        vocabulary = gpipe::load_token_vocabulary(file);
        if (std::int64_t(vocabulary.size()) > deck.model.vocabulary())
          throw gpipe::InputError(fmt::format("{}: a vocabulary of {} characters, but the model has {} "
                                              "logits per token",
                                              file, vocabulary.size(), deck.model.vocabulary()));
        for (size_t i = 0; i < o.generate.size(); ++i) {
          const auto at = vocabulary.find(o.generate[i]);
          if (at == std::string::npos)
            throw gpipe::InputError(fmt::format("--generate: character {} of the prompt ('{}') is not in "
                                                "the vocabulary of {}",
                                                i, o.generate.substr(i, 1), file));
          ids.push_back(std::int64_t(at));
        }
        if (ids.empty()) throw gpipe::InputError("--generate: the prompt is empty (give at least one character)");
        pipeline = std::make_unique<gpipe::Pipeline<T>>(deck, MPI_COMM_WORLD);
      }))
    return kExitInputError;
  if (!on_all_ranks(rank, [&] { pipeline->load_checkpoint(o.checkpoint); })) return kExitInputError;
  const std::int64_t V = deck.model.vocabulary();
  const double start = MPI_Wtime();
  std::vector<float> window(static_cast<size_t>(context));
  for (std::int64_t n = 0; n < o.tokens; ++n) {
    const std::int64_t used = std::min<std::int64_t>(std::int64_t(ids.size()), context);
    const auto first = ids.end() - used;
    std::fill(window.begin(), window.end(), 0.0f);
    for (std::int64_t t = 0; t < used; ++t) window[size_t(t)] = float(first[t]);
    const std::vector<T> logits = pipeline->predict(window.data(), 1);
    ids.push_back(next_token(logits.data() + (used - 1) * V, V, o, std::int64_t(ids.size())));
    if (ids.back() >= std::int64_t(vocabulary.size())) ids.back() = 0;  // an id the text never used
  }
  const double seconds = MPI_Wtime() - start;
  if (rank == 0) {
    std::string text;
    for (const auto id : ids) text += vocabulary[size_t(id)];
    fmt::print("{}\n", text);
    std::cerr << fmt::format("gpipe-infer: {} tokens ({}, temperature {}, top-k {}, seed {}) from {} on {} "
                             "ranks ({} cells), {:.3f} s\n",
                             o.tokens, o.temperature == 0 ? "greedy" : "sampled", o.temperature, o.top_k,
                             o.seed, o.checkpoint, pipeline->grid().ranks(), pipeline->grid().cells, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Options are parsed before MPI and Kokkos start: --help and --version
  // never start them (a CUDA build on a login node).
  const bool print = gpipe::app::launcher_rank() == 0;
  spdlog::set_pattern("gpipe-infer: %l: %v");

  CLI::App app{
      "Predict with a trained model: the checkpoint holds the model (its training deck), the "
      "weights and the input/target normalization. Inputs are raw samples in the units of the "
      "training data; regression outputs come back in the targets' units, classification outputs "
      "are logits (plus their arg-max).\n\n"
      "  mpirun -n 2 gpipe-infer ckpt/ckpt_000000600_3f2a9c01d4e5b678.h5 --input x.h5 --output y.h5\n"
      "  mpirun -n 2 gpipe-infer ckpt --input x.h5 --output y.h5   (the newest checkpoint in ckpt/)\n\n"
      "A language model continues a prompt instead (printed on standard output):\n\n"
      "  mpirun -n 2 gpipe-infer ckpt --generate 'And God said' --tokens 200 --temperature 0.8 "
      "--top-k 10\n\n"
      "Checkpoints are named ckpt_<step, 9 digits>_<run id, 16 hex digits>.h5. "
      "Any number of ranks: by default all ranks form one pipeline (K = ranks cells); --cells K "
      "makes ranks/K data-parallel replicas. Output layout: docs/file-formats.md, \"Predictions\" "
      "(installed as " GPIPE_DOCS_DIR "/file-formats.md); usage: docs/inference.md.",
      "gpipe-infer"};
  Options o;
  app.add_option("checkpoint", o.checkpoint,
                 "Checkpoint written by gpipe-train (ckpt_*.h5), or a checkpoint directory (its "
                 "newest complete checkpoint)")
      ->required();
  auto* generate = app.add_option("--generate", o.generate,
                                  "Language model: continue this prompt (text) and print it (no --input)");
  app.add_option("--input", o.input, "HDF5 file with the inputs (N, features)")->excludes(generate);
  app.add_option("--output", o.output, "HDF5 file to write (replaced if it exists)")->excludes(generate);
  app.add_option("--tokens", o.tokens, "--generate: tokens to generate")->capture_default_str();
  app.add_option("--temperature", o.temperature, "--generate: softmax temperature (0 = greedy)")
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "--generate: sample among the k most likely tokens (0 = all)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "--generate: seed of the sampling")->capture_default_str();
  app.add_option("--vocabulary", o.vocabulary,
                 "--generate: token file with the vocabulary (default: the deck's data.train_file)");
  app.add_option("--inputs-dataset", o.inputs_dataset, "Dataset of the inputs in --input")
      ->capture_default_str();
  app.add_option("--output-dataset", o.output_dataset, "Dataset of the predictions in --output")
      ->capture_default_str();
  app.add_option("--cells", o.cells, "Pipeline cells K (0 = all ranks; ranks/K replicas)")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size,
                 "Samples per forward pass (default: the deck's training.batch_size)");
  app.add_option("--micro-batches", o.micro_batches,
                 "Micro-batches per forward pass (default: the deck's training.micro_batches)");
  app.set_version_flag("--version", [] { return gpipe::build_description(); });
  app.footer(gpipe::app::kokkos_options_help());
  app.allow_extras();
  try {
    app.parse(argc, argv);
    for (const auto& extra : app.remaining())
      if (extra.rfind("--kokkos", 0) != 0) throw CLI::ExtrasError({extra});
    o.generating = generate->count() > 0;
    if (!o.generating && (o.input.empty() || o.output.empty()))
      throw CLI::RequiredError("--input and --output (or --generate)");
  } catch (const CLI::ParseError& e) {
    const int status = (print ? app.exit(e) : e.get_exit_code()) == 0 ? 0 : kExitInputError;
    // --version with an invalid GPIPE_KERNELS: the build is printed, the status says the run would fail
    if (status == 0 && dynamic_cast<const CLI::CallForVersion*>(&e)) return gpipe::app::version_status("gpipe-infer", print);
    return status;
  }
  const auto runtime = gpipe::app::start_runtime("gpipe-infer", argc, argv);
  if (!runtime) return gpipe::app::kExitRuntimeError;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  gpipe::Deck deck;
  gpipe::CheckpointInfo info;
  if (!on_all_ranks(rank, [&] {
        o.checkpoint = resolve_checkpoint(o.checkpoint, rank);
        info = gpipe::read_checkpoint_info(o.checkpoint);
        std::vector<std::string> sets{"parallel.cells=" + std::to_string(o.cells)};
        if (o.batch_size > 0) sets.push_back("training.batch_size=" + std::to_string(o.batch_size));
        if (o.micro_batches > 0)
          sets.push_back("training.micro_batches=" + std::to_string(o.micro_batches));
        deck = gpipe::parse_stored_deck(info.deck, o.checkpoint + " (deck)", sets);
        gpipe::forward_only_layout(deck);
      }))
    return kExitInputError;
  return gpipe::app::abort_on_error("gpipe-infer", rank, [&] {
    return gpipe::with_scalar(deck.precision, [&](auto t) {
      using T = decltype(t);
      return o.generating ? generate_text<T>(deck, o, rank) : infer<T>(deck, info, o, rank);
    });
  });
}

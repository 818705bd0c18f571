// gpipe-infer: predictions of a trained model (a gpipe checkpoint) for the
// inputs in an HDF5 file, pipelined over the MPI ranks and micro-batched as
// the training deck (stored in the checkpoint) says. See docs/inference.md.

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <spdlog/spdlog.h>

#include "abort_on_error.hpp"
#include "cli.hpp"
#include "gpipe/config.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/runtime.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
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
  app.add_option("--input", o.input, "HDF5 file with the inputs (N, features)")->required();
  app.add_option("--output", o.output, "HDF5 file to write (replaced if it exists)")->required();
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
  } catch (const CLI::ParseError& e) {
    if (print) return app.exit(e) == 0 ? 0 : kExitInputError;
    return e.get_exit_code() == 0 ? 0 : kExitInputError;
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
        deck = gpipe::parse_deck(info.deck, o.checkpoint + " (deck)", sets);
      }))
    return kExitInputError;
  return gpipe::app::abort_on_error("gpipe-infer", rank, [&] {
    return deck.precision == "double" ? infer<double>(deck, info, o, rank)
                                      : infer<float>(deck, info, o, rank);
  });
}

#pragma once
// Helper of the MPI tests: train a deck a few steps on a communicator and
// gather what the tests compare (weights, evaluation, activation bytes,
// partition).

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/dataset.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/train/pipeline.hpp"

namespace gpipe::test {

/// Runs steps [from, to) of a fixed data schedule on `p` (collective over its
/// communicator): step s takes mini-batch (s % per_epoch) of `batch` rows of
/// epoch_order(data.samples, seed, s / per_epoch, true).
template <class T>
void run_steps(Pipeline<T>& p, const Dataset& data, std::uint64_t seed, std::int64_t per_epoch,
               std::int64_t batch, std::int64_t from, std::int64_t to) {
  for (std::int64_t s = from; s < to; ++s) {
    const auto order = epoch_order(data.samples, seed, s / per_epoch, true);
    p.step(data, order, (s % per_epoch) * batch, batch);
  }
}

/// What one run of a deck gives a test.
struct PipelineRun {
  std::vector<double> params;  // gathered on rank 0 of the communicator
  Evaluation eval;             // of the training set after the steps, on every rank
  double eval_loss = 0;        // eval.loss
  std::vector<std::int64_t> activation_bytes;  // gather_activation_bytes()
  std::vector<int> partition;                  // layers per cell/stage
  int stages = 0;                              // partition.size()
};

/// Trains `steps` steps of deck `d` on `comm` (collective over comm) and
/// gathers a PipelineRun. Step s takes the (s % 2)-th mini-batch of `batch`
/// rows of epoch_order(data.samples, d.seed, s, true); s counts from the step
/// of the checkpoint `restart` when it is not empty, else from 0. Writes a
/// checkpoint to `save` when it is not empty.
template <class T = double>
PipelineRun run_pipeline(const Deck& d, const Dataset& data, std::int64_t batch, MPI_Comm comm,
                         int steps = 2, const std::string& restart = "",
                         const std::string& save = "") {
  Pipeline<T> trainer(d, comm);
  int first = 0;
  if (!restart.empty()) first = int(trainer.load_checkpoint(restart).step);
  for (int s = first; s < first + steps; ++s) {
    const auto order = epoch_order(data.samples, d.seed, s, true);
    trainer.step(data, order, (s % 2) * batch, batch);
  }
  if (!save.empty()) trainer.save_checkpoint(save);
  PipelineRun r;
  const auto params = trainer.gather_parameters();
  r.params.assign(params.begin(), params.end());
  r.eval = trainer.evaluate(data);
  r.eval_loss = r.eval.loss;
  r.activation_bytes = trainer.gather_activation_bytes();
  r.partition = trainer.partition().counts;
  r.stages = int(r.partition.size());
  return r;
}

}  // namespace gpipe::test

// In-situ training: a 1-D heat-equation solver trains a surrogate MLP through
// the gpipe C API while it runs.
//
// Each solver step advances a batch of independent episodes: a heat pulse is
// released at one of 8 source positions on a periodic rod and diffuses
// (explicit finite differences, u_t = u_xx). The surrogate learns the inverse
// map from an observed temperature field to the source that produced it (a
// classifier). After training, the surrogate's error on held-out states from
// episodes it never saw is reported.
//
//   mpirun -n 2 build/apps/examples/heat_surrogate [--steps 300] [--max-error 0.2] [--cells K]
//
// --cells K makes D = ranks / K data-parallel replicas of a K-cell pipeline
// (default: one pipeline over all ranks); `--cells 1` on 2 ranks is 2 x 1.
//
// Every rank runs the same seeded solver, so all ranks hold the same batch, as
// the collective gpipe calls require (only the first cell reads the inputs and
// only the last reads the labels).

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpipe/gpipe.h"

namespace {

constexpr int kGrid = 64;      // cells on the rod
constexpr int kSources = 8;    // classes: source positions
constexpr int kBatch = 64;     // episodes per solver step
constexpr double kR = 0.25;    // dt / dx^2, stable for r <= 0.5

const char* kDeck = R"(seed: 11
model:
  input: 64
  layers:
    - {type: dense, units: 128}
    - {type: relu}
    - {type: dense, units: 128}
    - {type: relu}
    - {type: dense, units: 8}
data: {train_images: none, train_labels: none, test_images: none, test_labels: none}
training: {epochs: 1, batch_size: 64, micro_batches: 4}
optimizer: {type: adam, lr: 0.002}
pipeline: {balance: flops}
)";

// A batch of episodes: fields (kBatch, kGrid) row-major and source labels.
struct Episodes {
  std::vector<float> fields = std::vector<float>(kBatch * kGrid);
  std::vector<int32_t> sources = std::vector<int32_t>(kBatch);
};

// Releases a pulse per episode and diffuses it for a random number of steps.
Episodes simulate(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> source(0, kSources - 1), steps(50, 300);
  std::uniform_real_distribution<double> amplitude(0.5, 1.5), shift(-3.0, 3.0);
  std::normal_distribution<double> noise(0.0, 0.03);
  Episodes e;
  std::vector<double> u(kGrid), next(kGrid);
  for (int b = 0; b < kBatch; ++b) {
    const int s = source(rng);
    const double center = (s + 0.5) * kGrid / kSources + shift(rng), a = amplitude(rng);
    for (int i = 0; i < kGrid; ++i) {
      double d = std::fabs(i - center);
      d = std::min(d, kGrid - d);  // periodic distance
      u[i] = a * std::exp(-d * d / 2.0);
    }
    for (int n = steps(rng); n > 0; --n) {
      for (int i = 0; i < kGrid; ++i)
        next[i] = u[i] + kR * (u[(i + 1) % kGrid] - 2 * u[i] + u[(i + kGrid - 1) % kGrid]);
      u.swap(next);
    }
    for (int i = 0; i < kGrid; ++i) e.fields[b * kGrid + i] = float(u[i] + noise(rng));
    e.sources[b] = s;
  }
  return e;
}

int check(gpipe_status status, const char* what) {
  if (status != GPIPE_OK) {
    std::fprintf(stderr, "heat_surrogate: %s failed (%d): %s\n", what, int(status), gpipe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int steps = 300;
  double max_error = 1.0;
  std::string deck = kDeck;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-error") == 0) max_error = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--cells") == 0) deck += std::string("parallel: {cells: ") + argv[i + 1] + "}\n";
  }
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  check(gpipe_initialize(&argc, &argv), "gpipe_initialize");
  gpipe_trainer* surrogate = nullptr;
  check(gpipe_create_from_string(deck.c_str(), MPI_COMM_WORLD, &surrogate), "gpipe_create_from_string");
  int replicas = 1, cells = 1;
  check(gpipe_layout(surrogate, &replicas, &cells, nullptr, nullptr), "gpipe_layout");
  if (rank == 0) std::printf("heat_surrogate: %d replicas x %d cells\n", replicas, cells);

  std::mt19937_64 solver(2024);
  for (int step = 1; step <= steps; ++step) {
    const Episodes e = simulate(solver);  // the simulation advances ...
    double loss = 0;                      // ... and the surrogate learns from it
    check(gpipe_train_step(surrogate, e.fields.data(), e.sources.data(), kBatch, &loss),
          "gpipe_train_step");
    if (rank == 0 && (step % 50 == 0 || step == steps))
      std::printf("heat_surrogate: solver step %d/%d, surrogate loss %.4f\n", step, steps, loss);
  }

  // Held-out states: episodes from a solver stream the surrogate never saw.
  std::mt19937_64 held_out(777);
  int wrong = 0, total = 0;
  std::vector<float> logits(kBatch * kSources);
  for (int batch = 0; batch < 8; ++batch) {
    const Episodes e = simulate(held_out);
    check(gpipe_predict(surrogate, e.fields.data(), kBatch, logits.data()), "gpipe_predict");
    for (int b = 0; b < kBatch; ++b) {
      int best = 0;
      for (int c = 1; c < kSources; ++c)
        if (logits[b * kSources + c] > logits[b * kSources + best]) best = c;
      wrong += best != e.sources[b];
      ++total;
    }
  }
  const double error = double(wrong) / total;
  if (rank == 0)
    std::printf("heat_surrogate: %d ranks, held-out error %.4f (%d of %d source positions wrong)\n", ranks,
                error, wrong, total);
  check(gpipe_destroy(surrogate), "gpipe_destroy");
  check(gpipe_finalize(), "gpipe_finalize");
  MPI_Finalize();
  return error <= max_error ? 0 : 1;
}

// In-situ training: a 1-D heat-equation solver trains a field-to-field
// surrogate through the gpipe C API while it runs, then lets the surrogate
// advance the field on its own and reports its error against the solver.
//
// The solver advances a batch of independent periodic rods (u_t = u_xx,
// explicit finite differences, r = dt/dx^2 = 0.25). One coarse step is
// kSubsteps solver steps. At every coarse step the surrogate trains on the
// pairs (field now, field one coarse step later) of the batch: a regression
// (model.loss: mse) of kGrid outputs from kGrid inputs, by three dense
// layers without activations (the heat equation's step is linear; a deep
// linear model trains faster than one matrix). Rods restart from new
// random initial conditions (sums of heat pulses) every kRestart coarse steps.
//
// After training, on initial conditions it never saw, the surrogate advances
// kRollout coarse steps feeding its own output back in; the RMSE and the
// maximum error against the solver are reported in the solver's units (the
// temperature; initial pulses have amplitude 0.5 to 1.5).
//
//   mpirun -n 2 build/apps/examples/heat_surrogate [--steps 1500] [--max-error 0.2] [--cells K]
//
// Exit status 1 if the rollout's maximum error exceeds --max-error.
// --cells K makes D = ranks / K data-parallel replicas of a K-cell pipeline
// (default: one pipeline over all ranks); `--cells 1` on 2 ranks is 2 x 1.
//
// Every rank runs the same seeded solver, so all ranks hold the same batch, as
// the collective gpipe calls require (only the first cell reads the inputs and
// only the last reads the targets).

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpipe/gpipe.h"

namespace {

constexpr int kGrid = 32;      // cells on the rod
constexpr int kBatch = 64;     // rods per solver batch
constexpr int kSubsteps = 8;   // solver steps per coarse (surrogate) step
constexpr int kRestart = 20;   // coarse steps before the rods get new initial conditions
constexpr int kRollout = 5;    // coarse steps the surrogate advances on its own
constexpr double kR = 0.25;    // dt / dx^2, stable for r <= 0.5

const char* kDeck = R"(seed: 11
model:
  input: 32
  loss: mse
  layers:
    - {type: dense, units: 64, init: glorot}
    - {type: dense, units: 64, init: glorot}
    - {type: dense, units: 32, init: glorot}
data: {format: hdf5, train_file: none, test_file: none}
training: {epochs: 1, batch_size: 64, micro_batches: 4}
optimizer: {type: adam, lr: 0.003, schedule: cosine}
pipeline: {balance: flops}
)";

using Fields = std::vector<double>;  // (kBatch, kGrid) row-major

// New initial conditions: 1 to 3 Gaussian pulses per rod.
Fields initial(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pulses(1, 3);
  std::uniform_real_distribution<double> center(0.0, kGrid), amplitude(0.5, 1.5), width(1.5, 4.0);
  Fields u(kBatch * kGrid, 0.0);
  for (int b = 0; b < kBatch; ++b)
    for (int p = pulses(rng); p > 0; --p) {
      const double c = center(rng), a = amplitude(rng), w = width(rng);
      for (int i = 0; i < kGrid; ++i) {
        double d = std::fabs(i - c);
        d = std::min(d, kGrid - d);  // periodic distance
        u[b * kGrid + i] += a * std::exp(-d * d / (2 * w * w));
      }
    }
  return u;
}

// One coarse step of the solver: kSubsteps explicit finite-difference steps.
Fields advance(const Fields& u0) {
  Fields u = u0, next(u.size());
  for (int n = 0; n < kSubsteps; ++n) {
    for (int b = 0; b < kBatch; ++b) {
      const double* r = &u[b * kGrid];
      for (int i = 0; i < kGrid; ++i)
        next[b * kGrid + i] = r[i] + kR * (r[(i + 1) % kGrid] - 2 * r[i] + r[(i + kGrid - 1) % kGrid]);
    }
    u.swap(next);
  }
  return u;
}

std::vector<float> as_float(const Fields& u) { return std::vector<float>(u.begin(), u.end()); }

int check(gpipe_status status, const char* what) {
  if (status != GPIPE_OK) {
    std::fprintf(stderr, "heat_surrogate: %s failed (%d): %s\n", what, int(status), gpipe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // FUNNELED: what a threaded (OpenMP) Kokkos backend needs; gpipe_initialize checks it.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int steps = 1500;
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
  check(gpipe_set_total_steps(surrogate, steps), "gpipe_set_total_steps");

  // Training while the solver runs: each coarse step gives a batch of pairs.
  std::mt19937_64 solver(2024);
  Fields u = initial(solver);
  for (int step = 1; step <= steps; ++step) {
    if (step % kRestart == 0) u = initial(solver);
    const Fields next = advance(u);  // the simulation advances ...
    double loss = 0;                 // ... and the surrogate learns from it
    check(gpipe_train_step_targets(surrogate, as_float(u).data(), as_float(next).data(), kBatch, &loss),
          "gpipe_train_step_targets");
    u = next;
    if (rank == 0 && (step % 100 == 0 || step == steps))
      std::printf("heat_surrogate: solver step %d/%d, surrogate mse %.3g\n", step, steps, loss);
  }

  // Held-out rollout: the surrogate advances unseen initial conditions on
  // its own for kRollout coarse steps; the solver does the same.
  std::mt19937_64 held_out(777);
  Fields truth = initial(held_out);
  std::vector<float> state = as_float(truth), out(kBatch * kGrid);
  double sq = 0, worst = 0;
  for (int s = 1; s <= kRollout; ++s) {
    truth = advance(truth);
    check(gpipe_predict(surrogate, state.data(), kBatch, out.data()), "gpipe_predict");
    state = out;
    sq = 0;
    for (int k = 0; k < kBatch * kGrid; ++k) {
      const double e = double(state[k]) - truth[k];
      sq += e * e;
      worst = std::max(worst, std::fabs(e));
    }
  }
  const double rmse = std::sqrt(sq / (kBatch * kGrid));
  if (rank == 0)
    std::printf("heat_surrogate: %d ranks, %d-step rollout of %d unseen rods (%d solver steps): RMSE "
                "%.4f, max error %.4f (temperature units; pulses 0.5-1.5)\n",
                ranks, kRollout, kBatch, kRollout * kSubsteps, rmse, worst);
  check(gpipe_destroy(surrogate), "gpipe_destroy");
  check(gpipe_finalize(), "gpipe_finalize");
  MPI_Finalize();
  return worst <= max_error ? 0 : 1;
}

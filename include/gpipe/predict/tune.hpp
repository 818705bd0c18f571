#pragma once
// gpipe-plan --tune: the zero-bubble schedule for a deck's measured (or
// modelled) per-stage F, I and W times, built by the greedy scheduler
// (pipeline/schedule_v.hpp, the zero-bubble paper's heuristic) under an
// activation-memory limit and chosen by simulating the step
// (predict/simulate.hpp). Pure: no MPI, no Kokkos.

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/schedule.hpp"
#include "gpipe/predict/predict.hpp"

namespace gpipe {

/// The most activation bytes `rank` holds at once under `schedule`: over its
/// op list, F(m) of stage s adds activation_bytes[s] and m's last op on s (B,
/// or W of a split backward) frees them.
std::int64_t peak_activation_bytes(const Schedule& schedule, const std::vector<std::int64_t>& activation_bytes,
                                   int rank);

struct TuneCandidate {
  std::string name;        ///< e.g. "greedy V, W fills every gap"
  double step_s = 0;       ///< simulated step (simulate_step's makespan)
  double bubble = 0;       ///< simulated idle fraction
  bool fits = true;        ///< every rank's peak_activation_bytes within its limit
  std::vector<std::int64_t> limit_bytes;  ///< [rank] the limit (in_flight x its stages' activation bytes)
  std::vector<std::int64_t> activation_bytes;  ///< [stage] per micro-batch (step_input's estimate)
  Schedule schedule;
};

struct TuneResult {
  std::vector<std::int64_t> limit_bytes;  ///< [rank] the activation limit with one stage per rank
  std::vector<TuneCandidate> candidates;  ///< in the order tried; the first is ZB-H1 (zero_bubble)
  int best = -1;                          ///< index of the fastest that fits
  double zb_h1_step_s = 0;                ///< ZB-H1's simulated step, the baseline
};

/// Tunes the deck's training step on `ranks` ranks: with the op times,
/// messages and activation bytes of step_input (options.costs: synthetic
/// keys, a --calibrate/--costs file, or FLOPs) it tries, besides ZB-H1
/// (zero_bubble, kept as a candidate when it fits), greedy_zero_bubble on
/// one stage per rank and on the V map of 2K stages (when the model has >= 2K
/// layers), each with both W policies and planned with and without a
/// message delay (the link's latency plus the mean boundary message's
/// transmit time; every candidate is then simulated with the real link),
/// with the per-stage time of the largest micro-batch. The limit on rank r is `in_flight`
/// micro-batches of its layers (the sum of its stages' activation_bytes
/// times in_flight; ZB-H1 and 1F1B's cell 0 hold K). The best is the fewest
/// simulated seconds among those that fit (ties: the first). The deck's
/// pipeline.w_group applies to every candidate as to the deck's own
/// schedule: each is planned per micro-batch, then its W ops are grouped
/// (group_weights; TuneCandidate::schedule is the grouped list, written
/// with its counts) and simulated with step_input of the grouped list (a
/// grouped W priced as one pass of the stacked layers over the group's
/// rows); the peak activation bytes count each member until its group's W.
/// Throws InputError as step_input does, and for in_flight < 1.
TuneResult tune(const Deck& deck, int ranks, const PredictOptions& options, int in_flight);

/// The line gpipe-plan --tune prints under its header when the deck's
/// pipeline.w_group applies to the candidates (tune, tune_times), naming the
/// key and the value: "pipeline.w_group = 2: every candidate's W ops are
/// grouped 2 micro-batches at a time, as the deck's own schedule's would be
/// (the written file holds the grouped W ops)"; "" for w_group = 1.
std::string tune_w_group_note(const Deck& deck);

}  // namespace gpipe

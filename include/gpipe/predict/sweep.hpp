#pragma once
// gpipe-plan --sweep: every valid (D, K, M, schedule) of a deck on R ranks,
// predicted, and the best by samples/s within a memory limit per rank.

#include <cstdint>
#include <vector>

#include "gpipe/predict/predict.hpp"

namespace gpipe {

struct SweepRow {
  Prediction prediction;
  bool fits = true;  ///< max_memory_bytes() within the limit (always, without a limit)
};

struct SweepResult {
  int ranks = 0;
  std::int64_t batch_size = 0;
  std::int64_t memory_limit_bytes = 0;  ///< 0: none
  std::vector<SweepRow> rows;           ///< by K, then M, then schedule
  int best = -1;                        ///< index into rows of the fastest that fits; -1: none
};

/// Predicts `deck` (its N, layers, precision, remat, optimizer and
/// reduction mode kept) for every K dividing `ranks` with K <= L layers
/// (D = ranks / K), M = 1, 2, 4, ... up to the largest shard ceil(N / D),
/// and the three schedules; configurations grid_shape or plan_run refuse
/// (D > N, a shard smaller than M) are left out. Best: the highest
/// samples/s with max_memory_bytes() <= memory_limit_bytes (0: no limit);
/// ties go to the first (smaller K, M).
SweepResult sweep(const Deck& deck, int ranks, const PredictOptions& options, std::int64_t memory_limit_bytes);

}  // namespace gpipe

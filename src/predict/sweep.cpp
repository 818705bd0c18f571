#include "gpipe/predict/sweep.hpp"

#include "gpipe/core/error.hpp"
#include "gpipe/parallel/grid.hpp"
#include "gpipe/train/plan.hpp"

namespace gpipe {

SweepResult sweep(const Deck& deck, int ranks, const PredictOptions& options, std::int64_t memory_limit_bytes) {
  SweepResult out;
  out.ranks = ranks;
  out.batch_size = deck.training.batch_size;
  out.memory_limit_bytes = memory_limit_bytes;
  const int L = int(deck.model.layers.size());
  for (int K = 1; K <= std::min(ranks, L); ++K) {
    if (ranks % K != 0) continue;
    const int D = ranks / K;
    if (D > deck.training.batch_size) continue;
    Deck d = deck;
    d.parallel.cells = K;
    if (d.pipeline.balance == "explicit") d.pipeline.balance = "flops";  // an explicit list fits one K only
    const std::int64_t shard = largest_shard(d, D);
    for (std::int64_t M = 1; M <= shard; M *= 2)
      for (const ScheduleKind kind : {ScheduleKind::FillDrain, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubble}) {
        d.training.micro_batches = int(M);
        d.pipeline.schedule = kind;
        SweepRow row;
        try {
          row.prediction = predict(d, ranks, options);
        } catch (const InputError&) {
          continue;  // e.g. the smallest shard cannot hold M micro-batches
        }
        row.fits = memory_limit_bytes <= 0 || row.prediction.max_memory_bytes() <= memory_limit_bytes;
        out.rows.push_back(row);
        const int i = int(out.rows.size()) - 1;
        if (row.fits && (out.best < 0 || row.prediction.samples_per_s > out.rows[size_t(out.best)].prediction.samples_per_s))
          out.best = i;
      }
  }
  return out;
}

}  // namespace gpipe

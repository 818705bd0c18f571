#pragma once
// An emulated layer for performance studies (docs/performance-model.md,
// "Validation"): it does no arithmetic; it copies its input to its output and
// sleeps for the rest of a prescribed time per sample (so that many ranks can
// share few cores without competing for them). A deck of synthetic layers runs
// through the real cell runner, schedules, MPI transport and traces; only the
// compute is replaced. Deck:
//   {type: synthetic, units: 64, forward_us: 20, backward_input_us: 20,
//    backward_weights_us: 20, params: 1000}

#include <chrono>
#include <cstdint>

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Deck keys of `{type: synthetic, ...}`; times are microseconds per sample.
struct SyntheticConfig : LayerConfig {
  std::int64_t units = 0;           ///< output features (> 0)
  double forward_us = 0;            ///< forward (F) time per sample, >= 0
  double backward_input_us = 0;     ///< input-gradient (B) time per sample, >= 0 (default forward_us)
  double backward_weights_us = 0;   ///< weight-gradient (W) time per sample, >= 0 (default forward_us)
  std::int64_t params = 0;          ///< parameter count (>= 0), one (1, params) tensor "weight"
};

/// Waits until `seconds` (>= 0) have passed since `since`, by sleeping the
/// calling thread, minus what earlier calls on this thread overslept (a
/// sleep's wake-up overshoot: 10-20 us on Linux with the 1 us timer slack
/// this sets for the thread) or overran (work since `since` that took longer
/// than `seconds`); what cannot be paid off now is carried on. So consecutive
/// calls on one thread take at least the sum of their `seconds` minus what
/// was owed before the first, and exceed it by at most the last call's
/// overshoot when no work overran its time. Host only; never call it inside a kernel.
void emulate_compute(double seconds, std::chrono::steady_clock::time_point since);
/// emulate_compute(seconds, now).
void emulate_compute(double seconds);
/// Forgets the overshoot owed by earlier emulate_compute() calls on this
/// thread (for tests that measure a single call).
void reset_emulated_compute();

/// The synthetic layer. Forward of n rows: y = x on the first min(in, units)
/// columns and 0 on the others (the input is read as flat features,
/// whatever its shape), then it waits until n * forward_us have passed since
/// it started (emulate_compute: the copy is part of the prescribed time).
/// Backward: dx = dy on the common columns, 0 on the others, in n *
/// (backward_input_us + backward_weights_us); split (zero_bubble): the B op
/// computes dx in n * backward_input_us, the W op waits n *
/// backward_weights_us. The waits happen even when no input gradient is
/// asked for (the model's first layer), so every op costs its prescribed
/// time. Its `params` parameters are real (optimizer, gradient all-reduce and
/// checkpoints see them) but nothing reads them and their gradients stay 0.
/// FLOPs: 0.
template <class T>
class Synthetic final : public Layer<T> {
 public:
  explicit Synthetic(const LayerShape& shape);

  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override;
  bool splits_backward() const override { return true; }
  void backward_input(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                      SavedView<T> saved) override;
  void backward_weights(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                        SavedView<T> saved) override;
  using Layer<T>::forward;
  using Layer<T>::backward;
  const SyntheticConfig& config() const { return config_; }

 private:
  SyntheticConfig config_;
};

}  // namespace gpipe

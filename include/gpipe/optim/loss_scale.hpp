#pragma once
// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed
// Precision Training", sec. 3.2; the dynamic variant as in NVIDIA Apex /
// torch.cuda.amp.GradScaler): the loss gradient is multiplied by a scale S
// so that small gradients survive fp16's range (smallest subnormal 2^-24),
// the fp32 gradients are divided by S before the optimizer step, and S
// adapts:
//   a step whose gradients overflowed (any non-finite gradient on any cell
//   or replica: the pipeline's agreed flag reduction) is skipped and
//   S <- S * backoff;
//   after growth_interval consecutive applied steps, S <- S * growth.
// Pure bookkeeping, no communication: every rank keeps its own copy and
// feeds it the same agreed decision, so every copy stays identical.

#include <cstdint>

namespace gpipe {

class LossScaler {
 public:
  /// The range S stays in, whatever the backoffs and growths: below 2^-24
  /// (fp16's smallest subnormal) a scaled gradient of order 1 is 0 in fp16,
  /// and a scale that keeps shrinking reaches 0 or a subnormal whose
  /// reciprocal (the unscale) is infinite in fp32, turning finite gradients
  /// into NaN weights; above 2^64 the scaled loss gradient S / N overflows
  /// fp32 for any batch, and a scale grown to infinity can never back off
  /// (inf x backoff = inf: every later step skipped). The deck's
  /// training.loss_scale is checked against the same range.
  static constexpr double kMinScale = 0x1p-24;
  static constexpr double kMaxScale = 0x1p64;

  /// scale > 0, growth_interval >= 1, growth >= 1, 0 < backoff < 1 (the
  /// deck checks them: training.loss_scale*).
  LossScaler(double scale, std::int64_t growth_interval, double growth, double backoff)
      : scale_(clamped(scale)), interval_(growth_interval), growth_(growth), backoff_(backoff) {}
  LossScaler() = default;

  /// S for the next step, in [kMinScale, kMaxScale] (a restored or initial
  /// scale outside it is clamped into it).
  double scale() const { return scale_; }
  /// Applied steps since the last overflow or growth.
  std::int64_t good_steps() const { return good_; }
  /// Steps skipped for overflow so far.
  std::int64_t overflows() const { return overflows_; }

  /// Records the agreed outcome of a step: `overflow` true backs off (the
  /// step is skipped by the caller), false counts an applied step and grows
  /// S after growth_interval of them. Returns !overflow (apply the step).
  bool update(bool overflow) {
    if (overflow) {
      scale_ = scale_ * backoff_ < kMinScale ? kMinScale : scale_ * backoff_;
      good_ = 0;
      ++overflows_;
      return false;
    }
    if (++good_ >= interval_) {
      scale_ = scale_ * growth_ > kMaxScale ? kMaxScale : scale_ * growth_;
      good_ = 0;
    }
    return true;
  }

  /// Restores a state (a checkpoint's).
  void restore(double scale, std::int64_t good_steps, std::int64_t overflows) {
    scale_ = clamped(scale);
    good_ = good_steps;
    overflows_ = overflows;
  }

 private:
  static double clamped(double s) { return s < kMinScale ? kMinScale : s > kMaxScale ? kMaxScale : s; }
  double scale_ = 1.0;
  std::int64_t interval_ = 2000;
  double growth_ = 2.0;
  double backoff_ = 0.5;
  std::int64_t good_ = 0;
  std::int64_t overflows_ = 0;
};

}  // namespace gpipe

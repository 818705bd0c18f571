#pragma once
// Seconds of the three parts of one layer's work on one micro-batch.

namespace gpipe {

/// Seconds of one layer's forward, input-gradient (B of a split backward)
/// and weight-gradient (W) parts for one micro-batch; the fused backward
/// takes backward_input + backward_weights. A layer that does not split its
/// backward has all of it in backward_input.
struct LayerSeconds {
  double forward = 0;
  double backward_input = 0;
  double backward_weights = 0;
};

}  // namespace gpipe

#pragma once
// The loss the last cell applies to the model's outputs: one interface,
// chosen once per model (deck `model.loss`), the targets it reads (integer
// class labels or float target rows), and the metrics that fit it.
// Definitions: docs/input-deck.md ("model.loss") and docs/design.md.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpipe/core/views.hpp"
#include "gpipe/loss/exact_sum.hpp"
#include "gpipe/model/shapes.hpp"

namespace gpipe {

/// Sums over the rows of one micro-batch (or of many: operator+=).
///
/// Every sum is exact: the per-sample terms (each computed from that
/// sample's outputs alone, so the same whatever the layout) are added into
/// an ExactSum (loss/exact_sum.hpp), and `loss` and `moments` are those
/// exact sums rounded once to double. Adding sums of micro-batches, evaluation
/// chunks or replicas (operator+=, an integer MPI sum of the
/// words) in any order therefore gives bitwise the same figures: the logged
/// metrics do not depend on D, K, M or the schedule (docs/design.md,
/// "Metric sums").
struct LossSums {
  double loss = 0;           ///< sum over rows of the per-sample loss (loss_exact rounded once)
  std::int64_t correct = 0;  ///< classification: rows whose arg-max output equals the label
  /// Regression: 4 sums per output j, [4j + 0] sum of e^2, [4j + 1] sum of
  /// |e|, [4j + 2] sum of y, [4j + 3] sum of y^2, with e = prediction - y
  /// (y the target, in the units the model is trained in), each
  /// moments_exact[k] rounded once. Empty otherwise.
  std::vector<double> moments;
  ExactSum loss_exact;                ///< the exact sum behind `loss`
  std::vector<ExactSum> moments_exact;  ///< the exact sums behind `moments`

  /// Adds another set of sums exactly (moments element-wise; an empty side
  /// counts as zeros) and rounds `loss` and `moments` again.
  LossSums& operator+=(const LossSums& other);
  /// Sets `loss` and `moments` from the exact sums (after changing them).
  void round();
};

/// What the loss compares the outputs with: class labels (n) for
/// softmax_cross_entropy, or float targets (n, outputs) row-major for the
/// regression losses. The other member is empty.
/// For token_cross_entropy, labels holds per_row labels per row (the next
/// token id of each of the row's T tokens), row-major: (n * per_row).
template <class T>
struct Targets {
  ConstLabelVector labels;
  ConstMatrix<T> values;
  std::int64_t per_row = 1;  ///< labels per row (T for token_cross_entropy)

  Targets() = default;
  Targets(ConstLabelVector l, std::int64_t per = 1)  // NOLINT: implicit on purpose
      : labels(std::move(l)), per_row(per) {}
  Targets(ConstMatrix<T> v) : values(std::move(v)) {}    // NOLINT: implicit on purpose
  /// Rows held (labels or target rows).
  std::int64_t size() const {
    return values.extent(0) > 0 ? std::int64_t(values.extent(0)) : std::int64_t(labels.extent(0)) / per_row;
  }
  /// Rows [offset, offset + count) (no copy); an empty member stays empty.
  Targets rows(std::int64_t offset, std::int64_t count) const {
    Targets out;
    out.per_row = per_row;
    const auto range = std::make_pair(offset * per_row, (offset + count) * per_row);
    if (labels.extent(0) > 0) out.labels = Kokkos::subview(labels, range);
    if (values.extent(0) > 0) out.values = Kokkos::subview(values, std::make_pair(offset, offset + count), Kokkos::ALL);
    return out;
  }
};

/// A loss over the model's last-layer outputs.
///
/// Sums stay on the device: accumulate() launches one micro-batch's loss
/// and gradient kernels and adds its sums to device totals without a fence
/// or a host copy; take_sums() fences once and reads every sum accumulated
/// since the last take_sums(). A cell therefore calls accumulate() per
/// micro-batch and take_sums() once per step (or per evaluation batch).
/// The totals are exact (LossSums; atomic integer adds on the device), so
/// they are bitwise those of summing evaluate() results in any order, and
/// of any split of the same rows into micro-batches
/// (tests/unit/test_loss_accumulate.cpp, LossAccumulation and ExactSum).
template <class T>
class Loss {
 public:
  virtual ~Loss() = default;
  /// outputs: (n, outputs) row-major; targets: labels (n) or values
  /// (n, outputs). If doutputs has extent n (not 0), writes dL/doutputs =
  /// scale * d(loss_i)/d(outputs_i) into it; pass scale = 1/N with N the
  /// global mini-batch size, so the loss is the mean over the mini-batch
  /// whatever its split into micro-batches and shards (GPipe sec. 2.2).
  /// Adds the rows' sums to the device totals (see the class comment);
  /// returns before the kernels finish (on execution_space()).
  /// Throws PipelineError at once for targets of the wrong kind or shape;
  /// labels outside [0, outputs) are counted on the device and reported by
  /// the next take_sums().
  virtual void accumulate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale, Matrix<T> doutputs) = 0;
  /// Fences execution_space() once, returns the sums accumulated since the
  /// last take_sums() (zeros, without a fence, when there were none) and
  /// starts new totals. Throws PipelineError when a label was outside
  /// [0, outputs) (the totals are reset first). A caller that abandons a
  /// step after accumulate() (an exception) calls take_sums() to drop its
  /// partial sums.
  virtual LossSums take_sums() = 0;
  /// accumulate() then take_sums(): one micro-batch's sums (plus any still
  /// pending), one fence.
  LossSums evaluate(ConstMatrix<T> outputs, const Targets<T>& targets, T scale, Matrix<T> doutputs) {
    accumulate(outputs, targets, scale, doutputs);
    return take_sums();
  }
  /// Allocates the loss's buffers for micro-batches of up to `rows` rows of
  /// `outputs` outputs with `labels_per_row` labels each (the tokens per
  /// sample T for token_cross_entropy, whose outputs are T x V; 1 otherwise),
  /// so that accumulate() allocates nothing (a cell calls it at
  /// construction, before the first step). Without it buffers grow on first
  /// use.
  virtual void reserve(std::int64_t rows, std::int64_t outputs, std::int64_t labels_per_row = 1) {
    (void)rows;
    (void)outputs;
    (void)labels_per_row;
  }

  /// The execution-space instance accumulate() submits its kernels to and
  /// take_sums() fences (the cell's; the default instance unless set).
  const ExecSpace& execution_space() const { return space_; }
  void set_execution_space(const ExecSpace& space) { space_ = space; }

 private:
  ExecSpace space_{};
};

/// The loss `spec` names (softmax_cross_entropy, token_cross_entropy, mse, mae, huber).
/// Throws InputError for an unknown type or a non-positive Huber delta.
template <class T>
std::unique_ptr<Loss<T>> make_loss(const LossSpec& spec);

/// Regression metrics, per output and over all outputs, in the data's
/// units (targets de-standardized with `target_scale`).
struct RegressionMetrics {
  std::vector<double> rmse, mae, r2;  ///< per output
  double rmse_all = 0;  ///< sqrt(mean over samples and outputs of e^2)
  double mae_all = 0;   ///< mean over samples and outputs of |e|
  double r2_all = 0;    ///< 1 - sum SSE / sum SStot, pooled over outputs
};

/// Metrics from LossSums::moments of `samples` rows. target_scale: the
/// standard deviation each output's targets were divided by (empty: all 1),
/// so RMSE and MAE come back in the data's units; R^2 is scale-free. An
/// output whose targets are constant has R^2 = 0. No moments or no samples:
/// empty per-output metrics and NaN overall figures (a figure of nothing is not 0).
RegressionMetrics regression_metrics(const std::vector<double>& moments, std::int64_t samples,
                                     const std::vector<double>& target_scale = {});

}  // namespace gpipe

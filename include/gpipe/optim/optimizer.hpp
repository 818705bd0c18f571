#pragma once
// Optimizers over a cell's flat parameter buffer. Each rank updates only its
// own cell's parameters; the update is element-wise, so the result does not
// depend on the partition.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpipe/core/views.hpp"

namespace gpipe {

/// The deck's `optimizer` section.
struct OptimizerSpec {
  std::string type = "adam";  ///< sgd | adam | adamw
  double lr = 1e-3;           ///< base learning rate
  double momentum = 0.9;      ///< sgd: momentum mu (0 = plain SGD)
  double beta1 = 0.9;         ///< adam/adamw: first-moment decay
  double beta2 = 0.999;       ///< adam/adamw: second-moment decay
  double eps = 1e-8;          ///< adam/adamw: denominator epsilon
  double weight_decay = 0;    ///< sgd/adam: L2 term added to the gradient; adamw: decoupled
  std::string schedule = "constant";  ///< constant | cosine (to 0 over the run's steps)
  /// Linear warm-up: step s < warmup_steps runs at lr (s + 1) / warmup_steps;
  /// the schedule then runs over the remaining steps (0: none).
  std::int64_t warmup_steps = 0;
  /// Gradient clipping by global norm (optim/clip.hpp): before every update
  /// the gradients are scaled by clip_norm / ||g|| when the L2 norm ||g||
  /// over the whole model exceeds clip_norm (0: off).
  double clip_norm = 0;
};

/// The optimizer type names, for help texts and error messages.
const std::vector<std::string>& optimizer_types();

template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of `params` (P) from the accumulated gradient `grads` (P) at
  /// learning rate `lr`, one kernel on execution_space() (not fenced: later
  /// work on that instance sees the update). Does not zero `grads`.
  virtual void step(Vector<T> params, ConstVector<T> grads, double lr) = 0;
  /// Number of step() calls so far (Adam's t).
  std::int64_t steps() const { return steps_; }
  /// Restores the step count (from a checkpoint).
  void set_steps(std::int64_t steps) { steps_ = steps; }
  /// Named state buffers (P elements each), for checkpoints.
  virtual std::vector<std::pair<std::string, Vector<T>>> state() = 0;
  /// The execution-space instance step() launches on (the cell's,
  /// CellOptions::space; default-constructed until set).
  const ExecSpace& execution_space() const { return space_; }
  void set_execution_space(const ExecSpace& space) { space_ = space; }

 protected:
  std::int64_t steps_ = 0;
  ExecSpace space_{};
};

/// SGD with momentum: v = mu v + g + wd p;  p -= lr v.
template <class T>
class Sgd final : public Optimizer<T> {
 public:
  Sgd(const OptimizerSpec& spec, std::int64_t size);
  void step(Vector<T> params, ConstVector<T> grads, double lr) override;
  std::vector<std::pair<std::string, Vector<T>>> state() override { return {{"velocity", v_}}; }

 private:
  OptimizerSpec spec_;
  Vector<T> v_;
};

/// Adam (Kingma & Ba 2015, Algorithm 1), and AdamW (Loshchilov & Hutter 2019,
/// Algorithm 2) when `decoupled`: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) [+ lr wd p if decoupled;
/// else wd p is added to g first].
template <class T>
class Adam final : public Optimizer<T> {
 public:
  Adam(const OptimizerSpec& spec, std::int64_t size, bool decoupled);
  void step(Vector<T> params, ConstVector<T> grads, double lr) override;
  std::vector<std::pair<std::string, Vector<T>>> state() override {
    return {{"m", m_}, {"v", v_}};
  }

 private:
  OptimizerSpec spec_;
  bool decoupled_;
  Vector<T> m_, v_;
};

/// Builds the optimizer named by spec.type for `size` parameters; throws
/// InputError for an unknown type or invalid hyper-parameters.
template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(const OptimizerSpec& spec, std::int64_t size);

/// Learning rate at `step` (0-based) of `total_steps` under spec.schedule,
/// after spec.warmup_steps of linear warm-up: lr (step + 1) / warmup_steps
/// for step < warmup_steps (so the first step's rate is not 0); then
/// constant lr, or cosine lr (1 + cos(pi (step - w) / (total_steps - w))) / 2
/// with w = warmup_steps (total_steps <= w: lr). total_steps = 0: unknown
/// (cosine then gives lr; Pipeline refuses that before a step).
/// Progress may be counted in another unit than steps: with `unit` = the
/// samples one step trains, `step` and `total_steps` are samples (trained
/// before the step, and the run's total) and the warm-up covers
/// warmup_steps x unit samples, so the curve is the same function of
/// training progress after a restart with another layout (gpipe-train).
double learning_rate(const OptimizerSpec& spec, std::int64_t step, std::int64_t total_steps,
                     std::int64_t unit = 1);

}  // namespace gpipe

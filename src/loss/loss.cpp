#include "gpipe/loss/loss.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpipe/core/error.hpp"
#include "gpipe/layers/softmax_cross_entropy.hpp"
#include "gpipe/loss/regression.hpp"
#include "gpipe/loss/token_cross_entropy.hpp"

namespace gpipe {

LossSums& LossSums::operator+=(const LossSums& other) {
  loss_exact += other.loss_exact;
  correct += other.correct;
  if (moments_exact.size() < other.moments_exact.size()) moments_exact.resize(other.moments_exact.size());
  for (size_t i = 0; i < other.moments_exact.size(); ++i) moments_exact[i] += other.moments_exact[i];
  round();
  return *this;
}

void LossSums::round() {
  loss = loss_exact.value();
  moments.resize(moments_exact.size());
  for (size_t i = 0; i < moments_exact.size(); ++i) moments[i] = moments_exact[i].value();
}

template <class T>
std::unique_ptr<Loss<T>> make_loss(const LossSpec& spec) {
  using R = RegressionLoss<T>;
  if (spec.type == "softmax_cross_entropy") return std::make_unique<SoftmaxCrossEntropy<T>>();
  if (spec.type == "token_cross_entropy") return std::make_unique<TokenCrossEntropy<T>>();
  if (spec.type == "mse") return std::make_unique<R>(R::Kind::Mse);
  if (spec.type == "mae") return std::make_unique<R>(R::Kind::Mae);
  if (spec.type == "huber") {
    if (!(spec.huber_delta > 0))
      throw InputError(fmt::format("model.huber_delta: expected a positive number, got {}",
                                   spec.huber_delta));
    return std::make_unique<R>(R::Kind::Huber, spec.huber_delta);
  }
  throw InputError(fmt::format("model.loss: unknown loss '{}' (expected softmax_cross_entropy, "
                               "token_cross_entropy, mse, mae or huber)",
                               spec.type));
}

RegressionMetrics regression_metrics(const std::vector<double>& moments, std::int64_t samples,
                                     const std::vector<double>& target_scale) {
  RegressionMetrics m;
  const size_t p = moments.size() / 4;
  if (p == 0 || samples <= 0) {  // nothing measured (e.g. every step skipped): no figure, never 0
    m.rmse_all = m.mae_all = m.r2_all = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  const double n = double(samples);
  double se_all = 0, ae_all = 0, tot_all = 0;
  for (size_t j = 0; j < p; ++j) {
    const double s = j < target_scale.size() ? target_scale[j] : 1.0;
    const double se = moments[4 * j] * s * s, ae = moments[4 * j + 1] * s;
    const double sy = moments[4 * j + 2], syy = moments[4 * j + 3];
    const double tot = std::max(syy - sy * sy / n, 0.0) * s * s;
    m.rmse.push_back(std::sqrt(se / n));
    m.mae.push_back(ae / n);
    m.r2.push_back(tot > 0 ? 1.0 - se / tot : 0.0);
    se_all += se;
    ae_all += ae;
    tot_all += tot;
  }
  m.rmse_all = std::sqrt(se_all / (n * double(p)));
  m.mae_all = ae_all / (n * double(p));
  m.r2_all = tot_all > 0 ? 1.0 - se_all / tot_all : 0.0;
  return m;
}

#define GPIPE_INSTANTIATE(T) \
  template std::unique_ptr<Loss<T>> make_loss<T>(const LossSpec&);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe

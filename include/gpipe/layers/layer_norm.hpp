#pragma once
// Layer normalization over features (Ba, Kiros, Hinton 2016, eq. 4):
// y = (x - mean) / sqrt(var + eps) * gamma + beta, per row.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Parameters "gamma" (1, features), initialized to 1, and "beta"
/// (1, features), initialized to 0. var is the biased (1/features) variance.
/// backward recomputes each row's mean and 1/std from x.
template <class T>
class LayerNorm final : public Layer<T> {
 public:
  LayerNorm(std::int64_t index, std::int64_t features, double eps);

  std::string type() const override { return "layer_norm"; }
  std::vector<ParameterSpec> parameter_specs() const override;
  void bind(T* values, T* gradients) override;
  void initialize(std::uint64_t seed) override;
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx) override;
  double eps() const { return eps_; }

 protected:
  double count_flops(std::int64_t batch, bool input_gradient) const override;

 private:
  using Unmanaged = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  double eps_;
  Unmanaged gamma_, beta_, gamma_grad_, beta_grad_;
  Kokkos::View<T**, Kokkos::LayoutRight, MemSpace> row_stats_;  // (n, 2): mean, 1/std; grown on demand
};

}  // namespace gpipe

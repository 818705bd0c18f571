#pragma once
// Dense (fully connected, affine) layer: y = x W + b.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Initialization of Dense weights (biases start at zero).
enum class Init {
  He,      ///< U(-a, a), a = sqrt(6 / in)          (He et al. 2015, for ReLU/GELU)
  Glorot,  ///< U(-a, a), a = sqrt(6 / (in + out))  (Glorot & Bengio 2010)
};

/// Parameters: "weight" W (in, out) row-major and "bias" b (1, out).
/// forward:  y = x W + b                 (one KokkosBlas::gemm, beta = 1 on a bias-filled y)
/// backward: dW += x^T dy, db += sum_rows dy, dx = dy W^T   (two gemms)
/// Bias gradients are reduced per column in a fixed row order, so results
/// are bitwise reproducible on every backend.
template <class T>
class Dense final : public Layer<T> {
 public:
  Dense(std::int64_t index, std::int64_t in, std::int64_t out, Init init);

  std::string type() const override { return "dense"; }
  std::vector<ParameterSpec> parameter_specs() const override;
  void bind(T* values, T* gradients) override;
  void initialize(std::uint64_t seed) override;
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx) override;
  Init init() const { return init_; }

 protected:
  /// 2 n in out (forward) + 4 n in out (backward; 2 n in out without the
  /// input gradient) + 2 n out (bias).
  double count_flops(std::int64_t batch, bool input_gradient) const override;

 private:
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Init init_;
  Unmanaged weight_, weight_grad_;  // (in, out)
  Unmanaged bias_, bias_grad_;      // (1, out)
};

}  // namespace gpipe

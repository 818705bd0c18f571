#pragma once
// Dense (fully connected, affine) layer: y = x W + b.

#include "gpipe/layers/layer.hpp"

namespace gpipe {

/// Initialization of Dense weights (biases start at zero).
enum class Init {
  He,      ///< U(-a, a), a = sqrt(6 / in)          (He et al. 2015, for ReLU/GELU)
  Glorot,  ///< U(-a, a), a = sqrt(6 / (in + out))  (Glorot & Bengio 2010)
};

/// Deck keys of `{type: dense, units: 128, init: he}`.
struct DenseConfig : LayerConfig {
  std::int64_t units = 0;  ///< output features (> 0)
  Init init = Init::He;
};

/// Input shape (features); output (units).
/// Parameters: "weight" W (in, out) row-major and "bias" b (1, out).
/// forward:  y = x W + b                 (kernels::gemm_bias, gpipe/kernels/gemm.hpp)
/// backward: dW += x^T dy, db += sum_rows dy, dx = dy W^T   (two kernels::gemm)
/// Bias gradients are reduced per column in a fixed row order, so results
/// are bitwise reproducible on every backend.
/// FLOPs: 2 n in out (forward) + 4 n in out (backward; 2 n in out without the
/// input gradient) + 2 n out (bias).
template <class T>
class Dense final : public Layer<T> {
 public:
  explicit Dense(const LayerShape& shape);

  void bind(T* values, T* gradients) override;
  void initialize(std::uint64_t seed) override;
  void forward(const PassContext& ctx, ConstMatrix<T> x, Matrix<T> y, SavedView<T> saved) override;
  void backward(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                SavedView<T> saved) override;
  /// Splits: backward_input dx = dy W^T (one gemm); backward_weights
  /// dW += x^T dy, db += sum_rows dy. backward() runs weights then input.
  bool splits_backward() const override { return true; }
  /// With ctx.accumulate_gradients false: dW = x^T dy (the gemm's beta = 0)
  /// and db = sum_rows dy, without reading the old gradients.
  bool writes_gradients() const override { return true; }
  /// One gemm of k = N rows beats M of N/M (perf/bench_dense.cpp, WeightGradient).
  bool whole_batch_weights() const override { return true; }
  void backward_input(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy, Matrix<T> dx,
                      SavedView<T> saved) override;
  void backward_weights(const PassContext& ctx, ConstMatrix<T> x, ConstMatrix<T> dy,
                        SavedView<T> saved) override;
  using Layer<T>::forward;
  using Layer<T>::backward;
  Init init() const { return init_; }

 private:
  using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Init init_;
  Unmanaged weight_, weight_grad_;  // (in, out)
  Unmanaged bias_, bias_grad_;      // (1, out)
};

}  // namespace gpipe

// Portable convolution of the kernel seam (gpipe/kernels/conv.hpp): Kokkos
// kernels + KokkosBlas GEMMs (OpenBLAS here), float and double.
//
// Columns in Caffe's per-image layout (src/layers/im2col.hpp): cols (n*taps,
// P), sample i's (taps, P) block contiguous, so every product is one GEMM
// per sample whose shape does not depend on n: each sample's output and
// input gradient are bitwise independent of the micro-batch size (one big
// GEMM over n*P columns is not: OpenBLAS' edge kernels round the last
// n*P mod 16 columns differently), and no NCHW reordering is needed.
//   forward:  cols = im2col(x) into the caller's saved state (or the
//             workspace when there is none); y_i (F, P) = W cols_i per
//             sample, in place in y; y += b: 2 launches + n GEMMs.
//   weights:  db (+)= sums of dy per filter, one team per filter in fixed-
//             order lanes (bitwise reproducible at every thread count and
//             team size); dW (+)= sum_i dy_i cols_i^T (n GEMMs, i ascending,
//             accumulating; added to dW in one pass) with the forward's
//             columns, recomputed only without saved state: 1-2 launches +
//             n GEMMs.
//   data:     dcols_i = W^T dy_i (n GEMMs, into the workspace, never the
//             saved columns), dx = col2im(dcols): 1 launch + n GEMMs.
// Workspace (reserve): cols (n*taps, P) for dcols or recomputed columns,
// and dW's sum (F, taps).

#include <algorithm>

#include "../layers/im2col.hpp"
#include "gpipe/core/precision.hpp"
#include "conv_common.hpp"
#include "gpipe/core/fixed_sum.hpp"
#include "kokkos_blas.hpp"

namespace gpipe::kernels::portable {

namespace {

using gpipe::detail::Window2d;

Window2d window(const ConvShape& s) {
  Window2d g;
  g.channels = s.channels;
  g.height = s.height;
  g.width = s.width;
  g.kernel_h = s.kernel_h;
  g.kernel_w = s.kernel_w;
  g.stride_h = s.stride_h;
  g.stride_w = s.stride_w;
  g.pad_h = s.pad_h;
  g.pad_w = s.pad_w;
  return g;
}

template <class T>
using Unmanaged = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// y(i, f*P + p) += b(f). One team per (i, f).
template <class T, class B>
void add_bias(const ExecSpace& space, const B& b, const Matrix<T>& y, std::int64_t P) {
  const std::int64_t n = std::int64_t(y.extent(0)), F = std::int64_t(b.extent(0));
  Kokkos::parallel_for(
      "gpipe::Conv2d::forward_bias", RowPolicy(space, n * F, Kokkos::AUTO), KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t i = team.league_rank() / F, f = team.league_rank() % F;
        const T bias = b(f);
        T* dst = &y(i, f * P);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, P), [&](const std::int64_t p) { dst[p] += bias; });
      });
}

// dw += sum, element-wise.
template <class T>
void add_into(const ExecSpace& space, const Unmanaged<T>& sum, const Matrix<T>& dw) {
  const std::int64_t taps = std::int64_t(dw.extent(1));
  Kokkos::parallel_for(
      "gpipe::Conv2d::add_weight_gradient", Kokkos::RangePolicy<ExecSpace>(space, 0, std::int64_t(dw.size())),
      KOKKOS_LAMBDA(const std::int64_t e) { dw(e / taps, e % taps) += sum(e / taps, e % taps); });
}

// db(f) (+)= sum over (i, p) of dy(i, f*P + p): one team per filter f; the
// n*P terms, in (i, p) order, are split into kSumLanes contiguous chunks,
// each summed in order by one thread, and the chunk sums are added in chunk
// order: the same additions in the same order at every thread count, team
// size and backend.
template <class T, class DB>
void bias_gradient(const ExecSpace& space, const ConstMatrix<T>& dy, const DB& db, std::int64_t P, bool accumulate) {
  const std::int64_t n = std::int64_t(dy.extent(0)), F = std::int64_t(db.extent(0)), count = n * P;
  const std::int64_t chunk = (count + kSumLanes - 1) / kSumLanes;
  Kokkos::parallel_for(
      "gpipe::Conv2d::backward_bias",
      RowPolicy(space, F, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(sum_lanes_bytes<T>())),
      KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t f = team.league_rank();
        const SumLanes<T> lanes(team.team_scratch(0), kSumLanes);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSumLanes), [&](const int l) {
          // (no std::min in a kernel: host-only under nvcc, warning #20013-D)
          const std::int64_t lo = l * chunk < count ? l * chunk : count, hi = lo + chunk < count ? lo + chunk : count;
          T s = T(0);
          std::int64_t i = lo / P, p = lo % P;
          for (std::int64_t j = lo; j < hi; ++j) {
            s += dy(i, f * P + p);
            if (++p == P) {
              p = 0;
              ++i;
            }
          }
          lanes(l) = s;
        });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          T total = T(0);
          for (int l = 0; l < kSumLanes; ++l) total += lanes(l);
          db(f) = (accumulate ? db(f) : T(0)) + total;
        });
      });
}

template <class T>
class Conv2dPortable final : public Conv2d<T>::Impl {
 public:
  using Saved = typename Conv2d<T>::Saved;
  using Bias = typename Conv2d<T>::Bias;
  using ConstBias = typename Conv2d<T>::ConstBias;
  using Managed = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
  using Const = Kokkos::View<const T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  explicit Conv2dPortable(const ConvShape& s) : s_(s), g_(window(s)) {}

  void reserve(std::int64_t n) override {
    if (dw_sum_.extent(0) == 0)
      dw_sum_ = Managed(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::weight_gradient"), s_.filters,
                        s_.taps());
    if (std::int64_t(cols_.extent(0)) >= n * s_.taps()) return;
    cols_ = Managed(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::Conv2d::cols"), n * s_.taps(),
                    s_.pixels());
  }

  void forward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstBias b, Matrix<T> y,
               Saved saved) override {
    const std::int64_t n = std::int64_t(x.extent(0)), F = s_.filters, P = s_.pixels(), taps = s_.taps();
    reserve(n);
    const Unmanaged<T> cols = columns(saved, n);
    gpipe::detail::im2col<T>(space, g_, x, cols, "gpipe::Conv2d::im2col");
    for (std::int64_t i = 0; i < n; ++i)
      gpipe::detail::gemm(space, "N", "N", T(1), w, Const(&cols(i * taps, 0), taps, P), T(0),
                          Unmanaged<T>(&y(i, 0), F, P));
    if (b.extent(0) > 0) add_bias<T>(space, b, y, P);
  }

  void backward_data(const ExecSpace& space, ConstMatrix<T> dy, ConstMatrix<T> w, Matrix<T> dx) override {
    const std::int64_t n = std::int64_t(dy.extent(0)), F = s_.filters, P = s_.pixels(), taps = s_.taps();
    reserve(n);
    const Unmanaged<T> dcols(cols_.data(), n * taps, P);
    for (std::int64_t i = 0; i < n; ++i)
      gpipe::detail::gemm(space, "T", "N", T(1), w, Const(&dy(i, 0), F, P), T(0), Unmanaged<T>(&dcols(i * taps, 0), taps, P));
    gpipe::detail::col2im<T>(space, g_, dcols, dx, "gpipe::Conv2d::col2im");
  }

  void backward_weights(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, Saved saved, Matrix<T> dw,
                        Bias db, bool accumulate) override {
    const std::int64_t n = std::int64_t(dy.extent(0)), F = s_.filters, P = s_.pixels(), taps = s_.taps();
    reserve(n);
    if (db.extent(0) > 0) bias_gradient<T>(space, dy, db, P, accumulate);
    const bool kept = std::int64_t(saved.extent(0)) >= taps * n * P;
    const Unmanaged<T> cols = columns(saved, n);
    if (!kept) gpipe::detail::im2col<T>(space, g_, x, cols, "gpipe::Conv2d::im2col");
    // The sum over samples into dw itself, or, to add it, into the
    // workspace and then dw += sum in one pass (so a second backward adds
    // exactly what the first wrote: dw + (g_0 + g_1 + ...)).
    const Unmanaged<T> sum = accumulate ? Unmanaged<T>(dw_sum_.data(), F, taps) : Unmanaged<T>(dw.data(), F, taps);
    if (n == 0) Kokkos::deep_copy(space, sum, T(0));
    for (std::int64_t i = 0; i < n; ++i)
      gpipe::detail::gemm(space, "N", "T", T(1), Const(&dy(i, 0), F, P), Const(&cols(i * taps, 0), taps, P),
                          i > 0 ? T(1) : T(0), sum);
    if (accumulate) add_into<T>(space, sum, dw);
  }

  void backward(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> dy, ConstMatrix<T> w, Saved saved,
                Matrix<T> dw, Bias db, bool accumulate, Matrix<T> dx) override {
    backward_weights(space, x, dy, saved, dw, db, accumulate);
    if (dx.extent(0) > 0) backward_data(space, dy, w, dx);
  }

 private:
  // The columns of n samples: the caller's saved state when it holds them,
  // else the workspace.
  Unmanaged<T> columns(const Saved& saved, std::int64_t n) const {
    const std::int64_t taps = s_.taps(), P = s_.pixels();
    if (std::int64_t(saved.extent(0)) >= taps * n * P) return Unmanaged<T>(saved.data(), n * taps, P);
    return Unmanaged<T>(cols_.data(), n * taps, P);
  }

  ConvShape s_;
  Window2d g_;
  Managed cols_, dw_sum_;
};

}  // namespace

template <class T>
std::unique_ptr<typename Conv2d<T>::Impl> make_conv2d(const ConvShape& shape) {
  return std::make_unique<Conv2dPortable<T>>(shape);
}

template <class T>
void conv2d_bias_gradient(const ExecSpace& space, ConstMatrix<T> dy, typename Conv2d<T>::Bias db, std::int64_t P,
                          bool accumulate) {
  bias_gradient<T>(space, dy, db, P, accumulate);
}

#define GPIPE_INSTANTIATE(T)                                                                       \
  template std::unique_ptr<Conv2d<T>::Impl> make_conv2d<T>(const ConvShape&);                      \
  template void conv2d_bias_gradient<T>(const ExecSpace&, ConstMatrix<T>, typename Conv2d<T>::Bias, \
                                        std::int64_t, bool);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels::portable

#pragma once
// Internal: im2col / col2im for convolutions lowered to GEMMs, one per
// sample (Chellapilla et al. 2006; Caffe). Used by the portable
// convolution behind the kernel seam (src/kernels/conv_portable.cpp: conv2d
// and, with height = kernel_h = stride_h = 1 and pad_h = 0, conv1d), by
// pooling (Window2d, covering) and by patch_embed (the row layout).
//
// Input x: (n, C*H*W) row-major, each sample NCHW. The column matrix has one
// row per (sample, channel, kernel tap) and one column per output pixel
// (Caffe's per-image layout, the images' blocks stacked):
//   cols(i*taps + (c*KH + a)*KW + b, oh*OW + ow) = x(i, c, oh*SH - PH + a, ow*SW - PW + b)
// (zero outside the image), P = OH*OW, taps = C*KH*KW. With weights W
// (F, taps), W cols_i (cols_i: sample i's (taps, P) block) is sample i's
// (F, P) = NCHW output, written in place with no reordering.
// Inner loops run along image rows, contiguous in x and in cols.

#include <cstdint>

#include "gpipe/core/views.hpp"
#include "gpipe/layers/shape.hpp"

namespace gpipe::detail {

/// Geometry of a 2-D window sweep (convolution or pooling).
struct Window2d {
  std::int64_t channels = 0, height = 0, width = 0;     // input, per sample
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  std::int64_t pixels() const { return out_h() * out_w(); }
  std::int64_t taps() const { return channels * kernel_h * kernel_w; }
};

/// The square window (kernel, stride, pad) over an image [C, H, W], or over a
/// signal [C, L] as an image of height 1 with a 1 x kernel window (conv1d,
/// 1-D pooling: the same kernels with H = 1).
inline Window2d square_window(const Shape& in, std::int64_t kernel, std::int64_t stride,
                              std::int64_t pad) {
  const bool one_d = in.rank() == 2;
  Window2d g;
  g.channels = in[0];
  g.height = one_d ? 1 : in[1];
  g.width = one_d ? in[1] : in[2];
  g.kernel_h = one_d ? 1 : kernel;
  g.kernel_w = kernel;
  g.stride_h = one_d ? 1 : stride;
  g.stride_w = stride;
  g.pad_h = one_d ? 0 : pad;
  g.pad_w = pad;
  return g;
}


/// The output rows/columns o (0 <= o < out) whose window, starting at
/// o*stride - pad, covers input position `pos` with kernel size k:
/// [lo, hi] (empty when lo > hi).
KOKKOS_INLINE_FUNCTION void covering(std::int64_t pos, std::int64_t k, std::int64_t stride,
                                     std::int64_t pad, std::int64_t out, std::int64_t& lo,
                                     std::int64_t& hi) {
  const std::int64_t top = pos + pad;           // o*stride <= top
  const std::int64_t bottom = top - (k - 1);    // o*stride >= bottom
  lo = bottom <= 0 ? 0 : (bottom + stride - 1) / stride;
  hi = top < 0 ? -1 : top / stride;
  if (hi > out - 1) hi = out - 1;
}

/// cols (n*C*KH*KW, P) from x (n, C*H*W), on `space`: sample i's columns
/// are the contiguous (taps, P) block of rows i*taps .. (i+1)*taps - 1
/// (Caffe's per-image layout, images stacked), so W cols_i is sample i's
/// NCHW output and every per-sample product has the same shape whatever n
/// is. One team per (sample, tap, output row); its threads take the output
/// row's pixels.
template <class T, class X, class Cols>
void im2col(const ExecSpace& space, const Window2d& g, const X& x, const Cols& cols, const char* label) {
  const std::int64_t n = std::int64_t(x.extent(0));
  const std::int64_t OH = g.out_h(), OW = g.out_w(), taps = g.taps();
  const std::int64_t H = g.height, W = g.width, KH = g.kernel_h, KW = g.kernel_w;
  const std::int64_t SH = g.stride_h, SW = g.stride_w, PH = g.pad_h, PW = g.pad_w;
  Kokkos::parallel_for(
      label, RowPolicy(space, n * taps * OH, Kokkos::AUTO), KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t row = r / OH, oh = r % OH;  // row = i * taps + k
        const std::int64_t i = row / taps, k = row % taps;
        const std::int64_t c = k / (KH * KW), a = (k / KW) % KH, b = k % KW;
        const std::int64_t h = oh * SH - PH + a;
        T* dst = &cols(row, oh * OW);
        if (h < 0 || h >= H) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OW), [&](const std::int64_t ow) { dst[ow] = T(0); });
          return;
        }
        const T* src = &x(i, (c * H + h) * W);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OW), [&](const std::int64_t ow) {
          const std::int64_t w = ow * SW - PW + b;
          dst[ow] = (w >= 0 && w < W) ? src[w] : T(0);
        });
      });
}

/// dx (n, C*H*W) = the sum, over every cols entry that read input element
/// (i, c, h, w), of dcols (n*taps, P, the layout of im2col) at that entry. A
/// gather by input row: one team per (sample, channel, input row) adds the
/// taps (a, b) in ascending order, so results are bitwise reproducible on
/// every backend, with no atomics. On `space`.
template <class T, class DCols, class DX>
void col2im(const ExecSpace& space, const Window2d& g, const DCols& dcols, const DX& dx, const char* label) {
  const std::int64_t n = std::int64_t(dx.extent(0));
  const std::int64_t OH = g.out_h(), OW = g.out_w(), C = g.channels, taps = g.taps();
  const std::int64_t H = g.height, W = g.width, KH = g.kernel_h, KW = g.kernel_w;
  const std::int64_t SH = g.stride_h, SW = g.stride_w, PH = g.pad_h, PW = g.pad_w;
  Kokkos::parallel_for(
      label, RowPolicy(space, n * C * H, Kokkos::AUTO), KOKKOS_LAMBDA(const RowMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t i = r / (C * H), c = (r / H) % C, h = r % H;
        T* out = &dx(i, (c * H + h) * W);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, W), [&](const std::int64_t w) { out[w] = T(0); });
        for (std::int64_t a = 0; a < KH; ++a) {
          const std::int64_t th = h + PH - a;  // = oh * SH
          if (th < 0 || th % SH != 0 || th / SH >= OH) continue;
          const std::int64_t oh = th / SH;
          for (std::int64_t b = 0; b < KW; ++b) {
            const T* src = &dcols(i * taps + (c * KH + a) * KW + b, oh * OW);
            team.team_barrier();  // distinct w per ow within one (a, b); ordered across (a, b)
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OW), [&](const std::int64_t ow) {
              const std::int64_t w = ow * SW - PW + b;
              if (w >= 0 && w < W) out[w] += src[ow];
            });
          }
        }
      });
}

// Row layout (one row per (sample, output pixel), one column per tap):
//   cols(i*P + oh*OW + ow, (c*KH + a)*KW + b), i.e. (n*P, C*KH*KW); used
// where each pixel's patch feeds a Dense-style projection (patch_embed).

/// cols (n*P, C*KH*KW) from x (n, C*H*W).
template <class T, class X, class Cols>
void im2col_rows(const ExecSpace& space, const Window2d& g, const X& x, const Cols& cols, const char* label) {
  const std::int64_t n = std::int64_t(x.extent(0));
  const std::int64_t P = g.pixels(), OW = g.out_w(), taps = g.taps();
  const std::int64_t H = g.height, W = g.width, KH = g.kernel_h, KW = g.kernel_w;
  const std::int64_t SH = g.stride_h, SW = g.stride_w, PH = g.pad_h, PW = g.pad_w;
  const std::int64_t C = g.channels;
  (void)taps;
  // One work item per row (sample, pixel): its taps (c, a, b) in column
  // order, each kernel row a run of KW input values (no index division per
  // element).
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, n * P), KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t i = row / P, p = row % P;
        const std::int64_t oh = p / OW, ow = p % OW;
        std::int64_t k = 0;
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t a = 0; a < KH; ++a) {
            const std::int64_t h = oh * SH - PH + a;
            const bool inside = h >= 0 && h < H;
            for (std::int64_t b = 0; b < KW; ++b, ++k) {
              const std::int64_t w = ow * SW - PW + b;
              cols(row, k) = (inside && w >= 0 && w < W) ? x(i, (c * H + h) * W + w) : T(0);
            }
          }
      });
}

/// dx (n, C*H*W) = the sum, over every column entry that read input element
/// (i, c, h, w), of dcols at that entry. A gather: each dx element sums its
/// taps in a fixed order (a, b ascending), so results are bitwise
/// reproducible on every backend, with no atomics.
template <class T, class DCols, class DX>
void col2im_rows(const ExecSpace& space, const Window2d& g, const DCols& dcols, const DX& dx, const char* label) {
  const std::int64_t n = std::int64_t(dx.extent(0));
  const std::int64_t P = g.pixels(), OH = g.out_h(), OW = g.out_w();
  const std::int64_t H = g.height, W = g.width, KH = g.kernel_h, KW = g.kernel_w;
  const std::int64_t SH = g.stride_h, SW = g.stride_w, PH = g.pad_h, PW = g.pad_w;
  const std::int64_t features = g.channels * H * W;
  Kokkos::parallel_for(
      label, Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(space, {0, 0}, {n, features}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t e) {
        const std::int64_t c = e / (H * W), hw = e % (H * W);
        const std::int64_t h = hw / W, w = hw % W;
        T sum = T(0);
        for (std::int64_t a = 0; a < KH; ++a) {
          const std::int64_t th = h + PH - a;  // = oh * SH
          if (th < 0 || th % SH != 0 || th / SH >= OH) continue;
          for (std::int64_t b = 0; b < KW; ++b) {
            const std::int64_t tw = w + PW - b;
            if (tw < 0 || tw % SW != 0 || tw / SW >= OW) continue;
            sum += dcols(i * P + (th / SH) * OW + tw / SW, (c * KH + a) * KW + b);
          }
        }
        dx(i, e) = sum;
      });
}

}  // namespace gpipe::detail

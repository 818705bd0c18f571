#pragma once
// Deprecated internal alias: layers call the kernel seam
// (gpipe/kernels/gemm.hpp). Kept only for conv2d.cpp until the convolution
// half of issue 21 moves it behind the seam.
#include "../kernels/kokkos_blas.hpp"

// cuBLAS / cuBLASLt GEMM implementation of the kernel seam (CUDA builds with
// GPIPE_ENABLE_CUBLAS; float and double).
//
// Layout: gpipe's matrices are row-major; cuBLAS is column-major. A
// row-major (r, c) matrix with leading dimension ld is the column-major
// (c, r) matrix with the same ld, so C = op(A) op(B) (row-major) is computed
// as C^T = op(B)^T op(A)^T in column-major terms: the operands swap places
// and keep their own op, and no data moves.
//
//   gemm          cublasLtMatmul, CUBLASLT_EPILOGUE_DEFAULT.
//   gemm_bias     cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS: Y^T = W^T X^T
//                 + b, b broadcast along the columns of Y^T (the rows of Y):
//                 one kernel, no separate bias fill.
//   batched_gemm  cublasGemmStridedBatchedEx over the inner batch, once per
//                 outer index (one call when the outer stride is inner x the
//                 inner stride for all three operands: a single-level batch).
//
// Precision: float computes in CUBLAS_COMPUTE_32F, double in
// CUBLAS_COMPUTE_64F. With pipeline.tf32 (kernels::set_tf32, read at every
// call: kernels::uses_tf32) float computes in CUBLAS_COMPUTE_32F_FAST_TF32
// (tensor cores, operands rounded to TF32, fp32 accumulation); the math mode
// stays CUBLAS_DEFAULT_MATH either way. The cuBLASLt descriptors and
// algorithms are cached per compute type (the key's last field), so a TF32
// call never reuses an fp32 algorithm or the reverse.
//
// Determinism (the seam's promise in gpipe/kernels/gemm.hpp):
//   * repeatable: cuBLAS gives bitwise the same result for the same call on
//     the same GPU model and library version (cuBLAS documentation,
//     "Results reproducibility"), provided each stream has its own
//     workspace: each stream used gets one (workspace_for), set with
//     cublasSetWorkspace / passed to cublasLtMatmul.
//   * a row independent of the call's row count (gemm, gemm_bias): cuBLASLt's
//     heuristic picks kernels by shape, and another kernel may sum the k
//     terms in another order. The algorithm is therefore chosen once per
//     (kind, ops, n, k, type) at a fixed reference row count (kReferenceRows)
//     with split-K reductions excluded (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK
//     = NONE), and reused for every row count that cublasLtMatmulAlgoCheck
//     accepts; a row count it rejects falls back to the heuristic's choice
//     for that shape (counted: cublas_fallbacks()), and only there may rows
//     differ in their last bits between micro-batch sizes. NVIDIA does not
//     document that one kernel's k order is independent of m (stream-K style
//     kernels could make it depend on the grid): test_kernels_cuda.cpp
//     checks it on a GPU.
//   * batched_gemm: matrix (o, i) independent of outer/inner is not
//     promised by cuBLAS (its heuristic sees the batch count); repeatable
//     as above.
// Compiled with nvcc 13.0 / cuBLAS 13 (docs/porting.md); not run on a GPU by
// the session that wrote it.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "gpipe/kernels/vendor.hpp"
#include "implementations.hpp"

namespace gpipe::kernels::cublas {

static_assert(std::is_same_v<ExecSpace, Kokkos::Cuda>,
              "the cuBLAS implementation needs the Kokkos CUDA backend as the default execution space");

namespace {

constexpr std::int64_t kReferenceRows = 1024;

std::atomic<std::int64_t> fallbacks{0};

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("gpipe::kernels::cublas: {} failed: {} ({})", what,
                                         cublasGetStatusName(status), cublasGetStatusString(status)));
}

template <class T>
struct Types;
template <>
struct Types<float> {
  static constexpr cudaDataType_t data = CUDA_R_32F;
  static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};
template <>
struct Types<double> {
  static constexpr cudaDataType_t data = CUDA_R_64F;
  static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_64F;
};

cublasOperation_t op(Op o) { return o == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The compute type of a call: TF32 for float when pipeline.tf32 allows it.
template <class T>
cublasComputeType_t compute_type(Primitive primitive) {
  if constexpr (std::is_same_v<T, float>)
    if (uses_tf32(primitive)) return CUBLAS_COMPUTE_32F_FAST_TF32;
  (void)primitive;
  return Types<T>::compute;
}

// The process's handles and the per-stream workspaces (one host thread
// calls the seam; the mutex only guards first use).
struct Library {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  std::mutex mutex;
  std::map<cudaStream_t, Kokkos::View<unsigned char*, Kokkos::CudaSpace>> workspaces;

  Library() {
    check(cublasCreate(&handle), "cublasCreate");
    check(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check(cublasLtCreate(&lt), "cublasLtCreate");
  }
  // Not destroyed: the handles live until the process ends (after
  // Kokkos::finalize a cublasDestroy could run on a torn-down context).
  void* workspace_for(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = workspaces.find(stream);
    if (it == workspaces.end())
      it = workspaces
               .emplace(stream, Kokkos::View<unsigned char*, Kokkos::CudaSpace>(
                                    Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                       "gpipe::kernels::cublas::workspace"),
                                    kWorkspaceBytes))
               .first;
    return it->second.data();
  }
};

Library& library() {
  static Library* lib = new Library();  // see ~Library: intentionally never deleted
  return *lib;
}

// One cuBLASLt matmul: descriptors for one full shape and the algorithm.
struct LtEntry {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// (kind, ta, tb, m, n, k, bytes, compute type): kind 0 gemm, 1 gemm_bias.
using LtKey = std::tuple<int, int, int, std::int64_t, std::int64_t, std::int64_t, int, int>;

struct LtCache {
  std::mutex mutex;
  std::map<LtKey, LtEntry> entries;
  std::map<LtKey, cublasLtMatmulAlgo_t> reference;  // m = kReferenceRows in the key
};

LtCache& lt_cache() {
  static LtCache* c = new LtCache();
  return *c;
}

// Column-major descriptors of C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m)
// for row-major A (ar, ac), B (br, bc), C (m, n).
template <class T>
LtEntry describe(int kind, Op ta, Op tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* bias,
                 cublasComputeType_t compute) {
  LtEntry e;
  check(cublasLtMatmulDescCreate(&e.desc, compute, Types<T>::data), "cublasLtMatmulDescCreate");
  const cublasOperation_t first = op(tb), second = op(ta);  // the swapped operands
  check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof first), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof second), "TRANSB");
  if (kind == 1) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
          "EPILOGUE");
    const cudaDataType_t bias_type = Types<T>::data;
    check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof bias_type),
          "BIAS_DATA_TYPE");
    (void)bias;  // the pointer is set per call
  }
  // B row-major (k, n) [tb = N] is column-major (n, k), ld n; transposed: stored (n, k) row-major = (k, n) col-major, ld k.
  const std::int64_t b_rows = tb == Op::none ? n : k, b_cols = tb == Op::none ? k : n;
  const std::int64_t a_rows = ta == Op::none ? k : m, a_cols = ta == Op::none ? m : k;
  check(cublasLtMatrixLayoutCreate(&e.a, Types<T>::data, std::uint64_t(b_rows), std::uint64_t(b_cols), b_rows),
        "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&e.b, Types<T>::data, std::uint64_t(a_rows), std::uint64_t(a_cols), a_rows),
        "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&e.c, Types<T>::data, std::uint64_t(n), std::uint64_t(m), n),
        "cublasLtMatrixLayoutCreate");
  return e;
}

// The heuristic's first algorithm without split-K for entry `e`.
bool heuristic(const LtEntry& e, cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t bytes = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes),
        "MAX_WORKSPACE_BYTES");
  const std::uint32_t no_split = CUBLASLT_REDUCTION_SCHEME_NONE;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_split,
                                             sizeof no_split),
        "REDUCTION_SCHEME_MASK");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(library().lt, e.desc, e.a, e.b, e.c, e.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  algo = result.algo;
  return true;
}

template <class T>
LtEntry& lt_entry(int kind, Op ta, Op tb, std::int64_t m, std::int64_t n, std::int64_t k) {
  auto& cache = lt_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const int bytes = int(sizeof(T));
  const cublasComputeType_t compute = compute_type<T>(kind == 1 ? Primitive::gemm_bias : Primitive::gemm);
  const LtKey key{kind, int(ta), int(tb), m, n, k, bytes, int(compute)};
  auto it = cache.entries.find(key);
  if (it != cache.entries.end()) return it->second;
  LtEntry e = describe<T>(kind, ta, tb, m, n, k, nullptr, compute);
  // The algorithm of the reference row count, for every m it fits.
  const LtKey ref_key{kind, int(ta), int(tb), kReferenceRows, n, k, bytes, int(compute)};
  auto ref = cache.reference.find(ref_key);
  if (ref == cache.reference.end()) {
    LtEntry r = describe<T>(kind, ta, tb, kReferenceRows, n, k, nullptr, compute);
    cublasLtMatmulAlgo_t algo{};
    if (!heuristic(r, algo))
      throw std::runtime_error(fmt::format("gpipe::kernels::cublas: no cuBLASLt algorithm for n {} k {}", n, k));
    ref = cache.reference.emplace(ref_key, algo).first;
  }
  cublasLtMatmulHeuristicResult_t checked{};
  if (cublasLtMatmulAlgoCheck(library().lt, e.desc, e.a, e.b, e.c, e.c, &ref->second, &checked) ==
          CUBLAS_STATUS_SUCCESS &&
      checked.workspaceSize <= kWorkspaceBytes) {
    e.algo = ref->second;
  } else {
    if (!heuristic(e, e.algo))
      throw std::runtime_error(
          fmt::format("gpipe::kernels::cublas: no cuBLASLt algorithm for m {} n {} k {}", m, n, k));
    ++fallbacks;
  }
  return cache.entries.emplace(key, e).first->second;
}

template <class T>
void lt_matmul(const ExecSpace& space, int kind, Op ta, Op tb, T alpha, const T* a, std::int64_t lda,
               const T* b, std::int64_t ldb, T beta, T* c, std::int64_t m, std::int64_t n, std::int64_t k,
               const T* bias) {
  LtEntry& e = lt_entry<T>(kind, ta, tb, m, n, k);
  if (kind == 1)
    check(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
          "BIAS_POINTER");
  (void)lda;
  (void)ldb;  // packed row-major Views: the leading dimensions are in the descriptors
  const cudaStream_t stream = space.cuda_stream();
  void* workspace = library().workspace_for(stream);
  check(cublasLtMatmul(library().lt, e.desc, &alpha, b, e.a, a, e.b, &beta, c, e.c, c, e.c, &e.algo, workspace,
                       kWorkspaceBytes, stream),
        "cublasLtMatmul");
}

}  // namespace

std::string version() {
  const int v = int(cublasLtGetVersion());
  return fmt::format("cuBLAS {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

std::int64_t cublas_fallbacks() { return fallbacks.load(); }

template <class T>
void gemm(const ExecSpace& space, Op ta, Op tb, T alpha, ConstMatrix<T> a, ConstMatrix<T> b, T beta,
          Matrix<T> c) {
  const std::int64_t m = std::int64_t(c.extent(0)), n = std::int64_t(c.extent(1));
  const std::int64_t k = ta == Op::none ? std::int64_t(a.extent(1)) : std::int64_t(a.extent(0));
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta C, as BLAS does; cuBLASLt rejects k = 0
    portable::gemm<T>(space, ta, tb, alpha, a, b, beta, c);
    return;
  }
  lt_matmul<T>(space, 0, ta, tb, alpha, a.data(), std::int64_t(a.extent(1)), b.data(), std::int64_t(b.extent(1)),
               beta, c.data(), m, n, k, nullptr);
}

template <class T>
void gemm_bias(const ExecSpace& space, ConstMatrix<T> x, ConstMatrix<T> w, ConstMatrix<T> bias, Matrix<T> y) {
  const std::int64_t m = std::int64_t(x.extent(0)), k = std::int64_t(x.extent(1)), n = std::int64_t(w.extent(1));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    portable::gemm_bias<T>(space, x, w, bias, y);
    return;
  }
  lt_matmul<T>(space, 1, Op::none, Op::none, T(1), x.data(), k, w.data(), n, T(0), y.data(), m, n, k,
               bias.data());
}

template <class T>
void batched_gemm(const ExecSpace& space, Op ta, Op tb, std::int64_t outer, std::int64_t inner, T alpha,
                  const T* a, const Strided& sa, const T* b, const Strided& sb, T beta, T* c,
                  const Strided& sc) {
  const std::int64_t m = sc.rows, n = sc.cols, k = ta == Op::none ? sa.cols : sa.rows;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    portable::batched_gemm<T>(space, ta, tb, outer, inner, alpha, a, sa, b, sb, beta, c, sc);
    return;
  }
  auto& lib = library();
  const cudaStream_t stream = space.cuda_stream();
  void* workspace = lib.workspace_for(stream);
  std::lock_guard<std::mutex> lock(lib.mutex);  // the handle's stream and workspace for this call
  check(cublasSetStream(lib.handle, stream), "cublasSetStream");
  check(cublasSetWorkspace(lib.handle, workspace, kWorkspaceBytes), "cublasSetWorkspace");
  // One level when the outer batch continues the inner one for every operand.
  const bool flat = outer == 1 || (sa.outer_stride == inner * sa.inner_stride &&
                                   sb.outer_stride == inner * sb.inner_stride &&
                                   sc.outer_stride == inner * sc.inner_stride);
  const std::int64_t calls = flat ? 1 : outer, count = flat ? outer * inner : inner;
  const cublasComputeType_t compute = compute_type<T>(Primitive::batched_gemm);
  for (std::int64_t o = 0; o < calls; ++o)
    check(cublasGemmStridedBatchedEx(lib.handle, op(tb), op(ta), int(n), int(m), int(k), &alpha,
                                     b + o * sb.outer_stride, Types<T>::data, int(sb.ld), sb.inner_stride,
                                     a + o * sa.outer_stride, Types<T>::data, int(sa.ld), sa.inner_stride, &beta,
                                     c + o * sc.outer_stride, Types<T>::data, int(sc.ld), sc.inner_stride,
                                     int(count), compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
}

#define GPIPE_INSTANTIATE(T)                                                                                 \
  template void gemm<T>(const ExecSpace&, Op, Op, T, ConstMatrix<T>, ConstMatrix<T>, T, Matrix<T>);         \
  template void gemm_bias<T>(const ExecSpace&, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, Matrix<T>); \
  template void batched_gemm<T>(const ExecSpace&, Op, Op, std::int64_t, std::int64_t, T, const T*,          \
                                const Strided&, const T*, const Strided&, T, T*, const Strided&);
GPIPE_INSTANTIATE(float)
GPIPE_INSTANTIATE(double)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe::kernels::cublas

// The kernel seam's choice of implementation (gpipe/kernels/backend.hpp).
#include "gpipe/kernels/backend.hpp"
#include "gpipe/kernels/vendor.hpp"

#include <KokkosKernels_config.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#if defined(GPIPE_ENABLE_CUBLAS) || defined(GPIPE_ENABLE_CUDNN)
#include <cuda_runtime.h>
#endif

#include "gpipe/config.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/views.hpp"
#include "conv_common.hpp"
#include "implementations.hpp"
#include "reduced.hpp"

namespace gpipe::kernels {

namespace {

std::atomic<int> chosen{int(Choice::automatic)};
std::atomic<int> compute{int(Format::fp32)};
std::atomic<bool> tf32{false};
std::atomic<bool> tf32_noted{false};

#if defined(GPIPE_ENABLE_CUBLAS) || defined(GPIPE_ENABLE_CUDNN)
// TF32 tensor cores: compute capability 8.0 and newer (Ampere, Hopper,
// Blackwell). Asked once; false without a device (nothing runs there).
bool device_has_tf32() {
  static const bool has = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 8;
  }();
  return has;
}
#endif

// oneDNN runs on host memory only.
[[maybe_unused]] constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// The implementation `auto` picks, by measurement (perf/bench_seam.cpp;
// perf/README.md, "Kernel seam"; Intel Xeon with AVX-512 and AMX, one
// thread, Debian's OpenBLAS 0.3.21 and oneDNN 2.6.3):
//   float: oneDNN for every primitive it has. Its f32 matmul ran 3-4x
//     OpenBLAS' sgemm at every deck shape as the machine is set up (OpenBLAS
//     detects the virtual CPU as Prescott and runs SSE3 kernels) and at or
//     above it with OPENBLAS_CORETYPE=SkylakeX; its batched matmul ran 3-5x
//     the KokkosBatched team GEMMs on the attention products (16 x 16 x 16);
//     and it gives a row the same bits whatever the call's row count.
//   conv2d float: oneDNN too (perf/bench_conv.cpp at the CNN deck's
//     shapes: its direct AVX-512 kernels on blocked layouts ran forward
//     1-4x and backward-weights 1-3.8x the raw GEMM rate, the portable
//     im2col + GEMM 0.25-0.65x; perf/README.md "Convolution").
//   gemm and gemm_bias float below AVX-512 (onednn_f32_gemm_rule): portable,
//     so a row keeps its bits whatever the micro-batch size (the bitwise
//     invariants across M and K rest on it).
//   double: portable everywhere (oneDNN has no f64 matmul on CPUs).
//   bf16 (2 bytes: bf16 operands, fp32 accumulation): bf16_native_rule
//     (backend.hpp, its table of measurements): oneDNN's bf16 matmul and
//     convolution where the CPU has AMX, or is an AMD one with AVX-512 BF16
//     (Zen 5: 1.3-3.0x its f32 matmul); on an Intel CPU without AMX the
//     operands rounded to bf16 in fp32 buffers and oneDNN's f32
//     primitives, 1.0-2.1x faster there (perf/README.md, "Issue 22: the
//     bf16 primitives without AMX"; "Issue 22: the bf16 route rule").
//   CUDA builds with cuBLAS: cuBLAS for every primitive it has (not
//     measured: no GPU was lent to the session that added it; Kokkos
//     Kernels' own cuBLAS TPL runs the same library for the portable dense
//     GEMMs, without the bias epilogue and with a heuristic algorithm per
//     shape).
//   conv2d in CUDA builds with cuDNN: cuDNN (not measured either; the
//     portable im2col + per-sample GEMMs is the alternative).
Implementation automatic(Primitive p, int scalar_bytes) {
  // bf16 where the rule says the native primitives lose: the rounded route
  // (reduced.hpp) on the f32 primitives (implementation(p, 4)).
  if (scalar_bytes == 2 && has(Implementation::onednn, p, 2) && !bf16_native_rule(this_cpu(), p))
    return Implementation::portable;
  if (has(Implementation::cublas, p, scalar_bytes)) return Implementation::cublas;
  if (has(Implementation::cudnn, p, scalar_bytes)) return Implementation::cudnn;
  if (!has(Implementation::onednn, p, scalar_bytes)) return Implementation::portable;
  // Dense f32 GEMMs below AVX-512: oneDNN's row bits depend on the row count there.
  if (scalar_bytes == 4 && (p == Primitive::gemm || p == Primitive::gemm_bias) && !onednn_f32_gemm_rule(this_cpu()))
    return Implementation::portable;
  return Implementation::onednn;
}

std::atomic<int> route{int(Bf16Route::automatic)};

std::optional<Bf16Route> route_from_environment() {
  static const std::optional<Bf16Route> env = []() -> std::optional<Bf16Route> {
    const char* text = std::getenv("GPIPE_BF16_ROUTE");
    if (text == nullptr || *text == '\0') return std::nullopt;
    return parse_bf16_route(text, "environment variable GPIPE_BF16_ROUTE");
  }();
  return env;
}

std::optional<Choice> from_environment() {
  static const std::optional<Choice> env = []() -> std::optional<Choice> {
    const char* text = std::getenv("GPIPE_KERNELS");
    if (text == nullptr || *text == '\0') return std::nullopt;
    return parse_choice(text, "environment variable GPIPE_KERNELS");
  }();
  return env;
}

}  // namespace

const char* name(Implementation implementation) {
  switch (implementation) {
    case Implementation::portable: return "portable";
    case Implementation::onednn: return "onednn";
    case Implementation::cublas: return "cublas";
    case Implementation::cudnn: return "cudnn";
  }
  return "?";
}

const char* name(Primitive primitive) {
  switch (primitive) {
    case Primitive::gemm: return "gemm";
    case Primitive::gemm_bias: return "gemm_bias";
    case Primitive::batched_gemm: return "batched_gemm";
    case Primitive::attention: return "attention";
    case Primitive::conv2d: return "conv2d";
    case Primitive::eltwise: return "eltwise";
  }
  return "?";
}

const char* name(Choice choice) {
  switch (choice) {
    case Choice::automatic: return "auto";
    case Choice::portable: return "portable";
    case Choice::onednn: return "onednn";
    case Choice::cublas: return "cublas";
    case Choice::cudnn: return "cudnn";
  }
  return "?";
}

const char* name(CpuVendor vendor) {
  switch (vendor) {
    case CpuVendor::intel: return "intel";
    case CpuVendor::amd: return "amd";
    case CpuVendor::other: return "other";
  }
  return "?";
}

const char* name(Bf16Route r) {
  switch (r) {
    case Bf16Route::automatic: return "auto";
    case Bf16Route::native: return "native";
    case Bf16Route::rounded: return "rounded";
  }
  return "?";
}

CpuTraits this_cpu() {
#ifdef GPIPE_ENABLE_ONEDNN
  return onednn::cpu_traits();
#else
  return CpuTraits{};
#endif
}

bool bf16_native_rule(const CpuTraits& cpu, Primitive primitive) {
  if (primitive == Primitive::eltwise) return false;  // no bf16 primitive
  if (cpu.amx) return true;
  if (!cpu.avx512_bf16) return false;
  return cpu.vendor == CpuVendor::amd;
}

bool onednn_f32_gemm_rule(const CpuTraits& cpu) { return cpu.avx512_core; }

Bf16Route parse_bf16_route(const std::string& text, const std::string& field) {
  if (text == "auto") return Bf16Route::automatic;
  if (text == "native") return Bf16Route::native;
  if (text == "rounded") return Bf16Route::rounded;
  throw InputError(fmt::format("{}: unknown bf16 route '{}' (expected auto, native or rounded)", field, text));
}

void select_bf16_route(Bf16Route r) { route.store(int(r)); }

Bf16Route selected_bf16_route() {
  if (const auto env = route_from_environment()) return *env;
  return Bf16Route(route.load());
}

std::vector<Implementation> available() {
  std::vector<Implementation> out{Implementation::portable};
#ifdef GPIPE_ENABLE_ONEDNN
  if (host_memory) out.push_back(Implementation::onednn);
#endif
#ifdef GPIPE_ENABLE_CUBLAS
  out.push_back(Implementation::cublas);
#endif
#ifdef GPIPE_ENABLE_CUDNN
  out.push_back(Implementation::cudnn);
#endif
  return out;
}

bool has(Implementation implementation, Primitive primitive, int scalar_bytes) {
  if (implementation == Implementation::portable) return true;
#ifdef GPIPE_ENABLE_CUBLAS
  if (implementation == Implementation::cublas)
    return (scalar_bytes == 4 || scalar_bytes == 8) &&
           (primitive == Primitive::gemm || primitive == Primitive::gemm_bias || primitive == Primitive::batched_gemm);
#endif
#ifdef GPIPE_ENABLE_CUDNN
  if (implementation == Implementation::cudnn)
    return (scalar_bytes == 4 || scalar_bytes == 8) && primitive == Primitive::conv2d;
#endif
#ifdef GPIPE_ENABLE_ONEDNN
  // every primitive has a oneDNN implementation at float, and all but eltwise at bf16
  if (implementation == Implementation::onednn)
    return host_memory && (scalar_bytes == 4 || (scalar_bytes == 2 && primitive != Primitive::eltwise &&
                                                 this_cpu().avx512_core));
#else
  (void)primitive;
  (void)scalar_bytes;
#endif
  return false;
}

namespace {

// The words parse_choice accepts in this build: "auto, portable or onednn",
// plus cublas / cudnn where built.
std::string accepted_choices() {
  std::vector<std::string> words{"auto", "portable", "onednn"};
#ifdef GPIPE_ENABLE_CUBLAS
  words.push_back("cublas");
#endif
#ifdef GPIPE_ENABLE_CUDNN
  words.push_back("cudnn");
#endif
  std::string out = words[0];
  for (std::size_t i = 1; i < words.size(); ++i) out += (i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

}  // namespace

Choice parse_choice(const std::string& text, const std::string& field) {
  if (text == "auto") return Choice::automatic;
  if (text == "portable") return Choice::portable;
  if (text == "onednn") {
#ifdef GPIPE_ENABLE_ONEDNN
    if (host_memory) return Choice::onednn;
    throw InputError(fmt::format("{}: 'onednn' runs on host memory only; this build's memory space is {}",
                                 field, MemSpace::name()));
#else
    throw InputError(fmt::format("{}: this build has no oneDNN (configure with GPIPE_ENABLE_ONEDNN=ON "
                                 "and oneDNN installed); expected auto or portable",
                                 field));
#endif
  }
  if (text == "cublas") {
#ifdef GPIPE_ENABLE_CUBLAS
    return Choice::cublas;
#else
    throw InputError(fmt::format("{}: this build has no cuBLAS (a CUDA build of Kokkos with "
                                 "GPIPE_ENABLE_CUBLAS=ON); expected {}",
                                 field, accepted_choices()));
#endif
  }
  if (text == "cudnn") {
#ifdef GPIPE_ENABLE_CUDNN
    return Choice::cudnn;
#else
    throw InputError(fmt::format("{}: this build has no cuDNN (a CUDA build of Kokkos with "
                                 "GPIPE_ENABLE_CUDNN=ON and cuDNN 9); expected {}",
                                 field, accepted_choices()));
#endif
  }
  throw InputError(fmt::format("{}: unknown kernels '{}' (expected {})", field, text, accepted_choices()));
}

void select(Choice choice) { chosen.store(int(choice)); }

std::int64_t cublas_workspace_bytes() {
#ifdef GPIPE_ENABLE_CUBLAS
  return std::int64_t(cublas::kWorkspaceBytes);
#else
  return 0;
#endif
}

void set_tf32(bool allowed) { tf32.store(allowed); }

bool tf32_allowed() { return tf32.load(); }

bool has_tf32(Implementation implementation, Primitive primitive) {
#ifdef GPIPE_ENABLE_CUBLAS
  if (implementation == Implementation::cublas &&
      (primitive == Primitive::gemm || primitive == Primitive::gemm_bias || primitive == Primitive::batched_gemm))
    return device_has_tf32();
#endif
#ifdef GPIPE_ENABLE_CUDNN
  if (implementation == Implementation::cudnn && primitive == Primitive::conv2d) return device_has_tf32();
#endif
  (void)implementation;
  (void)primitive;
  return false;
}

bool uses_tf32(Primitive primitive) {
  return tf32_allowed() && has_tf32(implementation(primitive, 4), primitive);
}

namespace {
constexpr Primitive kPrimitives[] = {Primitive::gemm, Primitive::gemm_bias, Primitive::batched_gemm,
                                     Primitive::attention, Primitive::conv2d};
}  // namespace

std::string tf32_summary() {
  if (!tf32_allowed()) return "tf32 off";
  std::string on;
  for (Primitive p : kPrimitives)
    if (uses_tf32(p)) on += (on.empty() ? "" : ", ") + std::string(name(p));
  if (!on.empty()) return "tf32 on: " + on;
  return "tf32 requested, no effect: no float primitive of this run has TF32 (fp32 throughout)";
}

std::string tf32_note() {
  if (!tf32_allowed()) return "";
  for (Primitive p : kPrimitives)
    if (uses_tf32(p)) return "";
  if (tf32_noted.exchange(true)) return "";
  std::vector<std::string> used;
  for (Primitive p : kPrimitives) {
    const std::string n = name(implementation(p, 4));
    if (std::find(used.begin(), used.end(), n) == used.end()) used.push_back(n);
  }
  return fmt::format(
      "pipeline.tf32: true has no effect in this run: TF32 exists only for float GEMMs on cuBLAS and float "
      "convolutions on cuDNN with a GPU of compute capability 8.0 or newer, and this run's float primitives "
      "run {} (kernels: {}); computing in full fp32",
      fmt::join(used, ", "), name(selected()));
}

void set_compute_format(Format format) { compute.store(int(format)); }

Format compute_format() { return Format(compute.load()); }

Choice selected() {
  if (const auto env = from_environment()) return *env;
  return Choice(chosen.load());
}

Implementation implementation(Primitive primitive, int scalar_bytes) {
  const Choice choice = selected();
  if (scalar_bytes == 2 && choice != Choice::portable && has(Implementation::onednn, primitive, 2))
    switch (selected_bf16_route()) {
      case Bf16Route::native: return Implementation::onednn;
      case Bf16Route::rounded: return Implementation::portable;  // the rounded route
      case Bf16Route::automatic: break;
    }
  switch (choice) {
    case Choice::portable: return Implementation::portable;
    case Choice::onednn:
      return has(Implementation::onednn, primitive, scalar_bytes) ? Implementation::onednn
                                                                   : Implementation::portable;
    case Choice::cublas:
      return has(Implementation::cublas, primitive, scalar_bytes) ? Implementation::cublas
                                                                   : Implementation::portable;
    case Choice::cudnn:
      return has(Implementation::cudnn, primitive, scalar_bytes) ? Implementation::cudnn
                                                                  : Implementation::portable;
    case Choice::automatic: break;
  }
  return automatic(primitive, scalar_bytes);
}

WeightCopy::~WeightCopy() {
  if (params_) reduced::drop_weight_copy(params_);
}

void WeightCopy::refresh(const ExecSpace& space, const float* params, std::int64_t n) {
  const Format f = compute_format();
  if (!reduced::active(f) || n == 0) {
    if (params_) reduced::drop_weight_copy(params_);
    params_ = nullptr;
    return;
  }
  if (f == Format::bf16 && implementation(Primitive::gemm, 2) == Implementation::onednn)
    reduced::register_weight_copy(space, params, n);
  else
    reduced::register_rounded_weight_copy(space, f, params, n);
  params_ = params;
}

std::string build_summary() {
  std::string out = "kernels: portable (Kokkos Kernels, KokkosBlas TPLs as Kokkos Kernels was built)";
#ifdef GPIPE_ENABLE_ONEDNN
  out += fmt::format(", onednn ({}{})", onednn::version(), host_memory ? "" : "; unused: device memory space");
#else
  out += "; oneDNN not built (GPIPE_ENABLE_ONEDNN=OFF)";
#endif
#ifdef GPIPE_ENABLE_CUBLAS
  out += fmt::format(", cublas ({}: gemm, gemm_bias, batched_gemm)", cublas::version());
#elif defined(KOKKOS_ENABLE_CUDA)
  out += "; cuBLAS not built (GPIPE_ENABLE_CUBLAS=OFF)";
#endif
#ifdef GPIPE_ENABLE_CUDNN
  out += fmt::format(", cudnn ({}: conv2d)", cudnn::version());
#elif defined(KOKKOS_ENABLE_CUDA)
  out += "; cuDNN not built (GPIPE_ENABLE_CUDNN=OFF)";
#endif
#if defined(GPIPE_ENABLE_CUBLAS) && defined(GPIPE_ENABLE_CUDNN)
  out += "; TF32 (pipeline.tf32): cublas, cudnn float on compute capability >= 8.0";
#elif defined(GPIPE_ENABLE_CUBLAS)
  out += "; TF32 (pipeline.tf32): cublas float on compute capability >= 8.0";
#elif defined(GPIPE_ENABLE_CUDNN)
  out += "; TF32 (pipeline.tf32): cudnn float on compute capability >= 8.0";
#else
  out += "; TF32 (pipeline.tf32): none in this build";
#endif
  return out;
}

std::string selection_summary() {
  Choice choice;
  try {
    choice = selected();
    (void)selected_bf16_route();
  } catch (const InputError& e) {
    return e.what();
  }
  std::string out = fmt::format("{}:", name(choice));
  const char* sep = " ";
  for (Primitive p : {Primitive::gemm, Primitive::gemm_bias, Primitive::batched_gemm, Primitive::attention,
                      Primitive::conv2d, Primitive::eltwise})
    for (int bytes : {4, 8, 2}) {
      if (p == Primitive::eltwise && bytes == 2)  // fp32 work under a reduced format (eltwise.hpp)
        out += fmt::format("{}eltwise bf16 {} (fp32)", sep, name(implementation(p, 4)));
      else
        out += fmt::format("{}{} {} {}", sep, name(p), bytes == 4 ? "float" : bytes == 8 ? "double" : "bf16",
                           name(implementation(p, bytes)));
      sep = ", ";
    }
  return out + "; " + bf16_route_summary() + "; " + tf32_summary();
}

std::string bf16_route_summary() {
  const CpuTraits cpu = this_cpu();
  const bool native = bf16_native_rule(cpu, Primitive::gemm);
  return fmt::format("bf16 route {} (cpu {}, {}, {}: rule {})", name(selected_bf16_route()), name(cpu.vendor),
                     cpu.avx512_bf16 ? "avx512_bf16" : "no avx512_bf16", cpu.amx ? "amx" : "no amx",
                     native ? "native" : "rounded");
}

}  // namespace gpipe::kernels

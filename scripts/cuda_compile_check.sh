#!/usr/bin/env bash
# Compiles every translation unit of the project (src/, apps/, tests/, perf/)
# with nvcc, compile only (no link, nothing run), against a Kokkos CUDA
# install the developer already has. It needs no GPU: this is the check that
# finds CUDA compile breaks (device lambdas in private members, host-only
# calls in kernels, CUDA-only sources such as src/kernels/*_cublas.cpp and
# *_cudnn.cpp) on a machine without one. It never builds Kokkos.
#
# Usage: scripts/cuda_compile_check.sh KOKKOS_PREFIX [KOKKOSKERNELS_PREFIX] [-- CMAKE_ARGS...]
#   KOKKOS_PREFIX         a Kokkos 4.x install with Kokkos_ENABLE_CUDA=ON
#                         (bin/nvcc_wrapper, lib*/cmake/Kokkos)
#   KOKKOSKERNELS_PREFIX  its Kokkos Kernels install (default: KOKKOS_PREFIX)
#   CMAKE_ARGS            passed to the configure step (e.g. -DGPIPE_ENABLE_CUDNN=OFF)
# Environment: BUILD_DIR (default build-cuda-check), JOBS (default 2),
#   CUDA_HOME (default /usr/local/cuda; its bin/ goes on PATH for nvcc).
# Exit status 0 when every object compiled; otherwise 1, with the failing
# translation units listed (the compiler's messages are in BUILD_DIR/compile.log).
# docs/porting.md, "Checking the CUDA build without a GPU".
set -euo pipefail

usage() {
  sed -n '/^# Usage:/,/^# docs/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 1 && $1 != -h && $1 != --help ]] || usage
kokkos=$1
shift
kernels=$kokkos
if [[ $# -ge 1 && $1 != -- ]]; then
  kernels=$1
  shift
fi
[[ $# -ge 1 && $1 == -- ]] && shift
extra=("$@")

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$source_dir/build-cuda-check}
jobs=${JOBS:-2}
export PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH

wrapper=$kokkos/bin/nvcc_wrapper
config=$(ls "$kokkos"/lib*/cmake/Kokkos/KokkosConfig.cmake 2>/dev/null | head -n 1 || true)
if [[ ! -x $wrapper || -z $config ]]; then
  echo "cuda_compile_check: $kokkos is not a Kokkos install (needs bin/nvcc_wrapper and lib*/cmake/Kokkos)" >&2
  exit 2
fi
header=$kokkos/include/KokkosCore_config.h
if ! grep -q '^#define KOKKOS_ENABLE_CUDA$' "$header" 2>/dev/null; then
  echo "cuda_compile_check: $header does not define KOKKOS_ENABLE_CUDA: not a CUDA build of Kokkos" >&2
  exit 2
fi
if ! command -v ninja > /dev/null; then
  echo "cuda_compile_check: needs ninja (apt-get install ninja-build)" >&2
  exit 2
fi

# The device-lambda rule first: it needs no compiler at all.
python3 "$source_dir/scripts/check_device_lambdas.py" "$source_dir/src" "$source_dir/include" "$source_dir/apps"

echo "cuda_compile_check: configuring $build against $kokkos (nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
cmake -S "$source_dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$wrapper" \
  -DKokkos_ROOT="$kokkos" -DKokkosKernels_ROOT="$kernels" "${extra[@]}" > "$build.configure.log" 2>&1 || {
  tail -n 30 "$build.configure.log" >&2
  echo "cuda_compile_check: configure failed ($build.configure.log)" >&2
  exit 1
}
grep -E '^-- gpipe: ' "$build.configure.log" || true

# Every object file of every target, and nothing else (no link step).
mapfile -t objects < <(ninja -C "$build" -t targets all | sed -n 's/^\([^:]*\.o\): .*/\1/p' | sort -u)
echo "cuda_compile_check: compiling ${#objects[@]} translation units with -j$jobs (compile only)"
status=0
ninja -C "$build" -j "$jobs" -k 0 "${objects[@]}" > "$build/compile.log" 2>&1 || status=$?
failed=$(sed -n 's/^FAILED: \(.*\.o\).*/\1/p' "$build/compile.log")
warnings=$(grep -c -E 'warning' "$build/compile.log" || true)
if [[ $status -ne 0 ]]; then
  echo "cuda_compile_check: FAILED: these translation units do not compile for CUDA:" >&2
  echo "$failed" | sed 's/^/  /' >&2
  grep -E ' error' "$build/compile.log" | sort -u | head -n 40 >&2
  echo "cuda_compile_check: full messages in $build/compile.log" >&2
  exit 1
fi
echo "cuda_compile_check: all ${#objects[@]} translation units compiled ($warnings lines with 'warning' in $build/compile.log)"

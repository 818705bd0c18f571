#!/usr/bin/env bash
# Compiles every translation unit of the project (src/, apps/, tests/, perf/)
# with nvcc, compile only (nothing run), against a Kokkos CUDA install the
# developer already has, and with --link links every target as well. It
# needs no GPU: this is the check that finds CUDA compile and link breaks
# (device lambdas in private members, host-only calls in kernels, CUDA-only
# sources such as src/kernels/*_cublas.cpp and *_cudnn.cpp, missing symbols
# of cuBLAS / cuDNN) on a machine without one. It never builds Kokkos.
#
# Usage: scripts/cuda_compile_check.sh [--link] KOKKOS_PREFIX [KOKKOSKERNELS_PREFIX] [-- CMAKE_ARGS...]
#   --link                after the compile step, link every target (libgpipe,
#                         gpipe-train / gpipe-plan / gpipe-infer, the test and
#                         benchmark executables: `ninja all`, -k 0). Linking
#                         needs no GPU: the CUDA runtime, cuBLAS(Lt) and cuDNN
#                         are the toolkit's shared libraries, libcuda comes
#                         from the toolkit's stubs on a machine without a driver
#   KOKKOS_PREFIX         a Kokkos 4.x install with Kokkos_ENABLE_CUDA=ON
#                         (bin/nvcc_wrapper, lib*/cmake/Kokkos)
#   KOKKOSKERNELS_PREFIX  its Kokkos Kernels install (default: KOKKOS_PREFIX)
#   CMAKE_ARGS            passed to the configure step (e.g. -DGPIPE_ENABLE_CUDNN=OFF);
#                         without any, an already configured BUILD_DIR is reused as
#                         it is (ninja re-runs CMake itself when a CMakeLists.txt
#                         changed), so a rerun after a fix compiles only what changed
# Environment: BUILD_DIR (default build-cuda-check), JOBS (default 2),
#   CUDA_HOME (default /usr/local/cuda; its bin/ goes on PATH for nvcc),
#   OBJECTS (an extended regular expression: compile only the objects whose
#   path matches it, e.g. 'gpipe.dir/src/' for the library; default all),
#   STRICT=1 (fail on any nvcc warning located in the project's own files).
# Compiles in stages (library, apps, tests, other, perf: the most useful first)
# and, after each stage, lists the objects that compiled in BUILD_DIR/compiled.txt.
# Prints each step's wall time. Exit status 0 when every object compiled
# (and, with --link, every target linked); otherwise 1, with the failing
# translation units or targets listed (the messages are in BUILD_DIR/compile.log
# and BUILD_DIR/link.log).
# docs/porting.md, "Checking the CUDA build without a GPU".
set -euo pipefail

usage() {
  sed -n '/^# Usage:/,/^# docs/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

link=0
if [[ $# -ge 1 && $1 == --link ]]; then
  link=1
  shift
fi
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

minutes() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }

if [[ ! -f $build/build.ninja || ${#extra[@]} -gt 0 ]]; then
  echo "cuda_compile_check: configuring $build against $kokkos (nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
  SECONDS=0
  cmake -S "$source_dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$wrapper" \
    -DKokkos_ROOT="$kokkos" -DKokkosKernels_ROOT="$kernels" "${extra[@]}" > "$build.configure.log" 2>&1 || {
    tail -n 30 "$build.configure.log" >&2
    echo "cuda_compile_check: configure failed ($build.configure.log)" >&2
    exit 1
  }
  echo "cuda_compile_check: configured in $(minutes $SECONDS)"
else
  echo "cuda_compile_check: reusing the configured $build (pass CMAKE_ARGS after -- to configure again)"
fi
grep -E '^-- gpipe: ' "$build.configure.log" 2> /dev/null || true

# Every object file of every target (or those matching OBJECTS), and no link step.
mapfile -t objects < <(ninja -C "$build" -t targets all | sed -n 's/^\([^:]*\.o\): .*/\1/p' | sort -u |
  grep -E "${OBJECTS:-.}" || true)
if [[ ${#objects[@]} -eq 0 ]]; then
  echo "cuda_compile_check: no object matches OBJECTS='${OBJECTS:-}'" >&2
  exit 2
fi
# In stages, the most useful first, so that a run stopped part way (a slow or
# shared machine: one nvcc translation unit can take 10-30 minutes under load)
# has checked the library before the programs and the programs before the
# tests: library (gpipe.dir/src/), apps/, tests/, everything else (examples,
# the installed-header checks, Fortran), perf/. Each stage prints how many of
# its objects compiled and its wall time; BUILD_DIR/compiled.txt lists, in
# order, every object of this run that compiled (with the stage and the time).
stage_of() {
  case $1 in
    *gpipe.dir/src/*) echo 1 ;;
    apps/*) echo 2 ;;
    tests/*) echo 3 ;;
    perf/*) echo 5 ;;
    *) echo 4 ;;
  esac
}
stage_names=("" library apps tests other perf)
echo "cuda_compile_check: compiling ${#objects[@]} translation units with -j$jobs"
status=0
total=0
: > "$build/compile.log"
: > "$build/compiled.txt"
for stage in 1 2 3 4 5; do
  part=()
  for o in "${objects[@]}"; do [[ $(stage_of "$o") == "$stage" ]] && part+=("$o"); done
  [[ ${#part[@]} -gt 0 ]] || continue
  SECONDS=0
  ninja -C "$build" -j "$jobs" -k 0 "${part[@]}" >> "$build/compile.log" 2>&1 || status=1
  done_here=0
  for o in "${part[@]}"; do
    if [[ -f $build/$o ]] && ! grep -q -F "FAILED: $o" "$build/compile.log"; then
      done_here=$((done_here + 1))
      echo "${stage_names[$stage]} $(date -u +%H:%M:%S) $o" >> "$build/compiled.txt"
    fi
  done
  total=$((total + SECONDS))
  echo "cuda_compile_check: ${stage_names[$stage]}: $done_here of ${#part[@]} compiled in $(minutes $SECONDS)"
done
SECONDS=$total
failed=$(sed -n 's/^FAILED: \(.*\.o\).*/\1/p' "$build/compile.log")
warnings=$(grep -c -E 'warning' "$build/compile.log" || true)
if [[ $status -ne 0 ]]; then
  echo "cuda_compile_check: FAILED after $(minutes $SECONDS): these translation units do not compile for CUDA:" >&2
  echo "$failed" | sed 's/^/  /' >&2
  grep -E ' error' "$build/compile.log" | sort -u | head -n 40 >&2
  echo "cuda_compile_check: full messages in $build/compile.log" >&2
  exit 1
fi
echo "cuda_compile_check: all ${#objects[@]} translation units compiled in $(minutes $SECONDS) ($warnings lines with 'warning' in $build/compile.log)"
# nvcc's warnings located in the project's own files (not Kokkos', not the
# toolkit's). #20013-D / #20015-D ("calling a constexpr __host__ function
# from a __host__ __device__ function") are real bugs in kernels: on the
# device such a call is undefined (std::min, std::pair, a host lambda passed
# to a KOKKOS_INLINE_FUNCTION template). STRICT=1 makes any of them fail.
ours=$(grep -E '^[^ ]*(src|include|apps|tests|perf)/[^ ]*\([0-9]+\): warning' "$build/compile.log" |
  grep -v -E '/(cuda-prefix|kokkos|Kokkos|targets/x86_64-linux)/' | sort | uniq -c | sort -rn || true)
if [[ -n $ours ]]; then
  echo "cuda_compile_check: warnings in the project's sources (count, location, text):"
  echo "$ours" | cut -c1-300 | sed 's/^/  /'
  [[ ${STRICT:-0} -eq 1 ]] && exit 1
fi
[[ $link -eq 1 ]] || exit 0
if [[ -n ${OBJECTS:-} ]]; then
  echo "cuda_compile_check: --link links every target; OBJECTS limits the compile step only" >&2
fi

# The link step: every target of the build (ninja compiles any object the
# compile step left out first). Static and shared libraries, executables.
SECONDS=0
status=0
ninja -C "$build" -j "$jobs" -k 0 all > "$build/link.log" 2>&1 || status=$?
failed=$(sed -n 's/^FAILED: \(.*\)/\1/p' "$build/link.log")
if [[ $status -ne 0 ]]; then
  echo "cuda_compile_check: FAILED after $(minutes $SECONDS): these steps of the link do not build:" >&2
  echo "$failed" | sed 's/^/  /' >&2
  grep -E 'undefined reference|cannot find|error' "$build/link.log" | sort -u | head -n 40 >&2
  echo "cuda_compile_check: full messages in $build/link.log" >&2
  exit 1
fi
linked=$(ninja -C "$build" -t targets all | sed -n 's/^\([^:]*\): \(CXX_EXECUTABLE_LINKER\|CXX_STATIC_LIBRARY_LINKER\|CXX_SHARED_LIBRARY_LINKER\|C_EXECUTABLE_LINKER\|Fortran_EXECUTABLE_LINKER\)[^ ]*$/\1/p' | sort -u)
echo "cuda_compile_check: linked $(echo "$linked" | grep -c .) targets in $(minutes $SECONDS):"
echo "$linked" | sed 's/^/  /'
# What the executables load: the CUDA runtime and the vendor libraries.
for app in apps/gpipe-train apps/gpipe-plan apps/gpipe-infer; do
  [[ -x $build/$app ]] || continue
  libs=$(ldd "$build/$app" 2> /dev/null | sed -n 's/^\s*\(lib\(cudart\|cublas\|cublasLt\|cudnn\|cuda\)\.so[^ ]*\).*/\1/p' | sort -u | tr '\n' ' ')
  echo "cuda_compile_check: $app needs ${libs:-no CUDA library}"
done

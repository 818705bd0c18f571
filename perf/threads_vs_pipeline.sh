#!/usr/bin/env bash
# Threads or pipeline on one node: the deep deck (inputs/deep_mlp.yaml) on the
# same cores used four ways, samples/s side by side in one run:
#   1 x 1   K = 1, one rank, 1 thread                   (the reference)
#   1 x T   K = 1, one rank, T threads                  (threads only)
#   K = T   T ranks, pipeline of T cells, 1 thread each (pipeline only)
#   T x 1   T ranks, data-parallel replicas of a 1-cell pipeline (D = T, K = 1)
# "threads" means both Kokkos' OpenMP threads and OpenBLAS' threads (the
# Dense GEMMs, which dominate this deck, run in OpenBLAS through Kokkos
# Kernels' BLAS TPL): OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = T.
# Each rank gets T (or 1) cores of its own (Open MPI --map-by slot:PE=n
# --bind-to core) and its OpenMP threads are pinned inside them
# (OMP_PROC_BIND=close, OMP_PLACES=cores), so no configuration shares a core.
# OMP_WAIT_POLICY=passive: between Kokkos kernels the OpenMP threads sleep
# instead of spinning; with the default (active) they spin on the cores that
# OpenBLAS' own threads need for the GEMMs, and 1 x 2 ran at 0.63x of 1 x 1
# here (550 against 1548 samples/s passive; perf/README.md).
#
# Usage: perf/threads_vs_pipeline.sh BUILD_DIR [THREADS [OUT_DIR [--set KEY=VALUE ...]]]
#   BUILD_DIR  a build against a threaded Kokkos (OpenMP), e.g. build-openmp
#   THREADS    T, default 2 (the cores of this machine)
#   OUT_DIR    run summaries (JSON) and logs, default runs/threads-vs-pipeline
# e.g. perf/threads_vs_pipeline.sh build-openmp 2 runs/tvp --set data.train_limit=5120
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:?usage: perf/threads_vs_pipeline.sh BUILD_DIR [THREADS [OUT_DIR [--set KEY=VALUE ...]]]}
threads=${2:-2}
out=${3:-runs/threads-vs-pipeline}
shift $(( $# < 3 ? $# : 3 ))
train="$build/apps/gpipe-train"
[[ -x "$train" ]] || { echo "threads_vs_pipeline.sh: $train not found (build it first)" >&2; exit 2; }
grep -q "OPENMP\|THREADS" "$build/CMakeCache.txt" 2>/dev/null ||
  echo "threads_vs_pipeline.sh: warning: $build does not look like a threaded Kokkos build" >&2
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_PROC_BIND=close OMP_PLACES=cores OMP_WAIT_POLICY=passive

# run NAME RANKS THREADS [gpipe-train arguments]
run() {
  local name=$1 ranks=$2 t=$3
  shift 3
  echo "== $name: $ranks rank(s) x $t thread(s)" >&2
  mpirun -n "$ranks" --map-by "slot:PE=$t" --bind-to core --oversubscribe \
    -x OMP_NUM_THREADS="$t" -x OPENBLAS_NUM_THREADS="$t" -x OMP_PROC_BIND -x OMP_PLACES -x OMP_WAIT_POLICY \
    -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    "$train" inputs/deep_mlp.yaml --quiet --summary "$out/$name.json" "$@" \
    > "$out/$name.log" 2>&1 || { echo "$name failed: see $out/$name.log" >&2; tail -n 5 "$out/$name.log" >&2; return 1; }
}

T=$threads
run "1x1" 1 1 "$@"
run "1x${T}_threads" 1 "$T" "$@"
run "K${T}_pipeline" "$T" 1 "$@"
run "${T}x1_replicas" "$T" 1 --set parallel.cells=1 "$@"

/usr/bin/python3 - "$out" "$T" <<'EOF'
import json, sys
out, T = sys.argv[1], sys.argv[2]
rows = [("1x1", "K = 1, 1 rank x 1 thread"),
        (f"1x{T}_threads", f"K = 1, 1 rank x {T} threads"),
        (f"K{T}_pipeline", f"K = {T}, {T} ranks x 1 thread (pipeline)"),
        (f"{T}x1_replicas", f"{T} x 1 (D = {T} replicas, K = 1), {T} ranks x 1 thread")]
base = None
print(f"| configuration | samples/s | vs 1 x 1 |")
print(f"|---|---|---|")
for name, label in rows:
    s = json.load(open(f"{out}/{name}.json"))
    rate = s.get("samples_per_second")
    if base is None:
        base = rate
    speed = f"{rate / base:.2f}" if rate and base else "-"
    print(f"| {label} | {rate:.0f} | {speed} |" if rate else f"| {label} | - | - |")
EOF

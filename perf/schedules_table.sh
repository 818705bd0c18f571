#!/usr/bin/env bash
# The schedules table of perf/README.md: samples/s, idle fraction (from the
# traces) and peak activation bytes for every pipeline.schedule and M at
# K = 2, on the quickstart deck and the deep deck. One gpipe-train run per
# point (2 ranks, one epoch of data.train_limit samples, a trace), then
# perf/schedules_table.py prints the markdown table.
#
# usage: perf/schedules_table.sh [OUT_DIR [TRAIN_LIMIT [--set KEY=VALUE ...]]]
#   OUT_DIR      default runs/schedules
#   TRAIN_LIMIT  training samples per run (default 10240; a short check: 2560)
# environment: GPIPE_TRAIN (default build/apps/gpipe-train), MPIRUN (default
# mpirun), SCHEDULES (default "fill_drain 1f1b zero_bubble"; NAME:N runs
# NAME with pipeline.w_group=N, grouped W, e.g. "zero_bubble:4"), MICRO_BATCHES
# (default "1 2 4 8"), DECKS (default "inputs/fashion_mnist_mlp.yaml
# inputs/deep_mlp.yaml"). One BLAS/OpenMP thread per rank. Timings are only
# meaningful on an otherwise idle machine (issue 11: nothing else running).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-runs/schedules}
limit=${2:-10240}
shift 2 2>/dev/null || shift $# || true
bin=${GPIPE_TRAIN:-build/apps/gpipe-train}
mpirun=${MPIRUN:-mpirun}
schedules=${SCHEDULES:-fill_drain 1f1b zero_bubble}
mbs=${MICRO_BATCHES:-1 2 4 8}
decks=${DECKS:-inputs/fashion_mnist_mlp.yaml inputs/deep_mlp.yaml}
[ -x "$bin" ] || { echo "schedules_table.sh: $bin not found (build first, or set GPIPE_TRAIN)" >&2; exit 2; }
launcher=("$mpirun")
if [[ "$("$mpirun" --version 2>&1 || true)" == *"Open MPI"* ]]; then
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  launcher+=(-x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$out"
for deck in $decks; do
  name=$(basename "$deck" .yaml)
  for spec in $schedules; do
    schedule=${spec%%:*}
    group=1
    [ "$spec" = "$schedule" ] || group=${spec#*:}
    suffix=""
    [ "$group" = 1 ] || suffix="_w${group}"
    for m in $mbs; do
      run="$out/${name}_${schedule}${suffix}_M${m}"
      echo "$name $schedule w_group=$group M=$m -> $run.json"
      "${launcher[@]}" -n 2 "$bin" "$deck" --quiet --set "pipeline.schedule=$schedule" --set "pipeline.w_group=$group" \
        --set "training.micro_batches=$m" --set parallel.cells=2 --set training.epochs=1 \
        --set "data.train_limit=$limit" --set data.test_limit=256 \
        --summary "$run.json" --trace "$run.h5" "$@" >"$run.log" 2>&1 ||
        { echo "  failed: see $run.log" >&2; tail -5 "$run.log" >&2; }
    done
  done
done
/usr/bin/python3 perf/schedules_table.py "$out"

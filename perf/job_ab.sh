#!/usr/bin/env bash
# One whole 2-rank job of the deep deck (K = 2, M = 8, one epoch of 20480
# samples, one BLAS/OpenMP thread per rank), for side-by-side timing of two
# builds with farm-bench (perf/README.md, "Idle-time packing"):
#
#   farm-bench -n 5 --timeout 400 --vs 'perf/job_ab.sh OLD/gpipe-train fill_drain 1' \
#     -- perf/job_ab.sh build/apps/gpipe-train fill_drain 1
#
# usage: perf/job_ab.sh GPIPE_TRAIN SCHEDULE W_GROUP [--set KEY=VALUE ...]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: perf/job_ab.sh GPIPE_TRAIN SCHEDULE W_GROUP [--set KEY=VALUE ...]" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$1 schedule=$2 group=$3
shift 3
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
launcher=(mpirun)
[ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
ckpt=$(mktemp -d)
trap 'rm -rf "$ckpt"' EXIT
"${launcher[@]}" -n 2 --bind-to none "$bin" "$root/inputs/deep_mlp.yaml" --quiet \
  --set "pipeline.schedule=$schedule" --set "pipeline.w_group=$group" --set training.micro_batches=8 \
  --set parallel.cells=2 --set data.train_limit=20480 --set data.test_limit=256 --set training.epochs=1 \
  --set checkpoint.every_epochs=0 --set checkpoint.directory="$ckpt" "$@"

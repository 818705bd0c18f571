#!/bin/bash
# The body of strong_scaling.sbatch and weak_scaling.sbatch (which set MODE and
# source this file): runs one or several (K, M) points of a scaling study as
# job steps of one allocation. Every parameter comes from the environment:
#
#   MODE         strong | weak (set by the .sbatch file)
#   M            micro-batches of the single point, or
#   MS           several values of M ("1 4 16"): one job sweeps them all
#   KS           values of K to sweep (default: SLURM_NTASKS); each K <= SLURM_NTASKS
#   REPEATS      runs per point (default 1); with R > 1 the outputs are K{k}_M{m}_r{r}.*
#   N / N0       strong: global mini-batch N; weak: per-rank N0, N = N0*K
#                (default: the deck's training.batch_size)
#   TRAIN_LIMIT  weak: training samples at K = 1; data.train_limit = TRAIN_LIMIT*K
#                (default: the deck's data.train_limit; 0 = all data, not scaled)
#   DATASET_SAMPLES  samples the training data holds (default: scripts/dataset_samples.py);
#                weak points whose TRAIN_LIMIT*K exceeds it are refused, not capped
#   DECK, OUT, GPIPE_TRAIN, EXTRA_ARGS, KOKKOS_ARGS, SRUN_ARGS, MODULES: see the .sbatch files
#   GPIPE_DRY_RUN=1  print the srun commands, run nothing (tests/scripts)
#
# Each run writes NAME.json (summary), NAME.h5 (trace) and NAME.log (its
# output), NAME = OUT/K{k}_M{m}[_r{r}]. The exit status is 1 if a run failed
# or was refused, 2 for bad parameters.
set -euo pipefail

die() { echo "scaling_job.sh: error: $*" >&2; exit 2; }
warn() { echo "scaling_job.sh: warning: $*" >&2; }
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
deck_value() { sed -n "s/^[[:space:]]*$1:[[:space:]]*\\([0-9][0-9]*\\).*/\\1/p" "$DECK" | head -n 1; }

[ "${MODE:-}" = strong ] || [ "${MODE:-}" = weak ] || die "MODE must be strong or weak"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dry_run="${GPIPE_DRY_RUN:-0}"
ntasks="${SLURM_NTASKS:?run this script with sbatch (or set GPIPE_DRY_RUN=1 and SLURM_NTASKS)}"
KS="${KS:-$ntasks}"
MS="${MS:-${M:-}}"
[ -n "$MS" ] || die "set M, the number of micro-batches (sbatch --export=ALL,M=8 ...), or MS=\"1 4 16\""
REPEATS="${REPEATS:-1}"
DECK="${DECK:-inputs/deep_mlp.yaml}"
OUT="${OUT:-runs/$MODE-slurm}"
GPIPE_TRAIN="${GPIPE_TRAIN:-build/apps/gpipe-train}"
[ -f "$DECK" ] || die "$DECK: no such deck"
for k in $KS; do
  is_int "$k" || die "KS: '$k' is not a positive integer"
  [ "$k" -le "$ntasks" ] || die "K = $k > the job's $ntasks tasks (sbatch --ntasks)"
done
for m in $MS; do is_int "$m" || die "M: '$m' is not a positive integer"; done
is_int "$REPEATS" || die "REPEATS must be a positive integer, not '$REPEATS'"
if [ "$MODE" = strong ]; then
  batch="${N:-$(deck_value batch_size)}"
else
  batch="${N0:-$(deck_value batch_size)}"
fi
[ -n "$batch" ] || die "$DECK: no batch_size found; set N (strong) or N0 (weak)"
TRAIN_LIMIT="${TRAIN_LIMIT:-$(deck_value train_limit)}"
TRAIN_LIMIT="${TRAIN_LIMIT:-0}"
if [ "$MODE" = weak ] && [ "$TRAIN_LIMIT" != 0 ] && [ -z "${DATASET_SAMPLES:-}" ]; then
  # shellcheck disable=SC2086  # EXTRA_ARGS may override data paths
  DATASET_SAMPLES="$(python3 "$root/scripts/dataset_samples.py" "$DECK" ${EXTRA_ARGS:-} 2>/dev/null || echo 0)"
fi

gpus="${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-0}}"; gpus="${gpus##*:}"  # "a100:4" -> 4
# most ranks on one node; SLURM_TASKS_PER_NODE looks like "4(x2)" or "4,3"
per_node="$(tr ',' '\n' <<<"${SLURM_TASKS_PER_NODE:-$ntasks}" | sed 's/(.*//' | sort -n | tail -n 1)"
step=(--cpus-per-task="${SLURM_CPUS_PER_TASK:-1}")  # Slurm >= 22.05: srun does not inherit it
if [ "${gpus:-0}" -gt 0 ]; then
  if [ "$gpus" -lt "$per_node" ]; then
    echo "error: $gpus GPUs per node for $per_node ranks per node; each rank needs its own GPU" >&2
    exit 2
  fi
  # One GPU per task: each rank sees exactly one device, which is then device 0
  # for every Kokkos version. Without that binding (SLURM_GPUS_PER_TASK set by
  # the user, or SRUN_ARGS=--gpu-bind=none) Kokkos 4.x picks the device by the
  # node-local MPI rank (--kokkos-map-device-id-by=mpi_rank, its default; the
  # variable below makes it explicit); Kokkos 3.x needs
  # KOKKOS_ARGS=--kokkos-num-devices=GPUS_PER_NODE, else every rank uses device 0
  # (it silently ignores the 4.x option and variable).
  [ -n "${SLURM_GPUS_PER_TASK:-}" ] || step+=(--gpus-per-task=1)
  export KOKKOS_MAP_DEVICE_ID_BY="${KOKKOS_MAP_DEVICE_ID_BY:-mpi_rank}"
fi
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}" OMP_PROC_BIND=spread OMP_PLACES=threads
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

# A JSON check of a summary: the samples trained (data.train_limit capped?) and the load.
summary_check() {  # json requested_limit
  python3 - "$@" <<'EOF'
import json, sys
path, limit = sys.argv[1], int(sys.argv[2])
s = json.load(open(path))
load = (s.get("machine_load") or {}).get("start")
print(f"{s['samples_per_second']:.1f} samples/s, load {'n/a' if load is None else f'{load:.2f}'}")
got = s.get("train_samples")
if limit and got is not None and got < limit:
    print(f"CAPPED: data.train_limit = {limit} but only {got} samples were trained on", file=sys.stderr)
    sys.exit(3)
EOF
}

mkdir -p "$OUT"
failed=0
echo "$MODE scaling job ${SLURM_JOB_ID:-(none)}: K in {$KS}, M in {$MS}, $REPEATS repeat(s), deck $DECK -> $OUT"
for k in $KS; do
  n=$([ "$MODE" = strong ] && echo "$batch" || echo $((batch * k)))
  limit=()
  want=0
  if [ "$MODE" = weak ] && [ "$TRAIN_LIMIT" != 0 ]; then
    want=$((TRAIN_LIMIT * k))
    if [ "${DATASET_SAMPLES:-0}" -gt 0 ] && [ "$want" -gt "$DATASET_SAMPLES" ]; then
      echo "K=$k: REFUSED: weak scaling needs data.train_limit = $TRAIN_LIMIT*$k = $want samples but" \
           "the training data holds $DATASET_SAMPLES (lower TRAIN_LIMIT to $((DATASET_SAMPLES / k)) or less)" >&2
      failed=$((failed + 1))
      continue
    fi
    limit=(--set "data.train_limit=$want")
  fi
  nodes=$(( (k + per_node - 1) / per_node ))
  for m in $MS; do
    if [ "$m" -gt "$n" ]; then echo "K=$k M=$m N=$n: skipped (M > N)"; continue; fi
    for ((r = 1; r <= REPEATS; r++)); do
      name="$OUT/K${k}_M${m}"
      [ "$REPEATS" -eq 1 ] || name="${name}_r$r"
      # shellcheck disable=SC2086  # SRUN_ARGS, EXTRA_ARGS and KOKKOS_ARGS are split on purpose
      cmd=(srun --ntasks="$k" --nodes="$nodes" "${step[@]}" ${SRUN_ARGS:-}
           "$GPIPE_TRAIN" "$DECK" --set "training.batch_size=$n" --set "training.micro_batches=$m"
           --summary "$name.json" --trace "$name.h5" ${EXTRA_ARGS:-} ${limit[@]+"${limit[@]}"}
           ${KOKKOS_ARGS:-})
      if [ "$dry_run" = 1 ]; then echo "${cmd[*]}"; continue; fi
      rm -f "$name.json" "$name.h5"
      if "${cmd[@]}" >"$name.log" 2>&1; then
        if line="$(summary_check "$name.json" "$want")"; then
          echo "K=$k M=$m N=$n run $r: $line"
        else
          echo "K=$k M=$m N=$n run $r: $line (see the warning above)"
          failed=$((failed + 1))
        fi
      else
        echo "K=$k M=$m N=$n run $r: FAILED (exit $?); see $name.log" >&2
        failed=$((failed + 1))
      fi
    done
  done
done
[ "$failed" -eq 0 ] || { echo "scaling_job.sh: $failed point(s) failed or were refused" >&2; exit 1; }

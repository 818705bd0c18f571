#!/bin/bash
# The body of strong_scaling.sbatch, weak_scaling.sbatch, hybrid_scaling.sbatch
# and hybrid_weak_scaling.sbatch (which set MODE and source this file): runs
# one or several points of a scaling study as job steps of one allocation.
# Every parameter comes from the environment:
#
#   MODE         strong | weak | hybrid | hybrid-weak (set by the .sbatch file)
#   M            micro-batches of the single point, or
#   MS           several values of M ("1 4 16"): one job sweeps them all
#   KS           strong, weak: values of K = ranks to sweep (default: SLURM_NTASKS),
#                each K <= SLURM_NTASKS. hybrid: values of K = parallel.cells on
#                all SLURM_NTASKS = D x K ranks (default: every divisor), D = ranks / K
#   CELLS        hybrid-weak: K = parallel.cells (default 1)
#   DS           hybrid-weak: values of D (default 1 2 4 ... up to SLURM_NTASKS / K,
#                and that); a point runs on D x K ranks
#   REPEATS      runs per point (default 1); with R > 1 the outputs are NAME_r{r}.*
#   N / N0       strong, hybrid: global mini-batch N; weak: N = N0*K; hybrid-weak:
#                N = N0*D (default: the deck's training.batch_size)
#   TRAIN_LIMIT  weak (hybrid-weak): training samples at K = 1 (D = 1);
#                data.train_limit = TRAIN_LIMIT*K (*D) (default: the deck's
#                data.train_limit; 0 = all data, not scaled)
#   DATASET_SAMPLES  samples the training data holds (default: scripts/dataset_samples.py);
#                weak points whose scaled TRAIN_LIMIT exceeds it are refused, not capped
#   DECK, OUT, GPIPE_TRAIN, EXTRA_ARGS, KOKKOS_ARGS, SRUN_ARGS, MODULES: see the .sbatch files
#   GPIPE_DRY_RUN=1  print the srun commands, run nothing (tests/scripts)
#
# Each run writes NAME.json (summary), NAME.h5 (trace) and NAME.log (its
# output), NAME = OUT/K{k}_M{m}[_r{r}] (strong, weak) or OUT/D{d}_K{k}_M{m}[_r{r}]
# (hybrid modes, run with --set parallel.cells=K). The exit status is 1 if a
# run failed or was refused, 2 for bad parameters.
set -euo pipefail

die() { echo "scaling_job.sh: error: $*" >&2; exit 2; }
warn() { echo "scaling_job.sh: warning: $*" >&2; }
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
deck_value() { sed -n "s/^[[:space:]]*$1:[[:space:]]*\\([0-9][0-9]*\\).*/\\1/p" "$DECK" | head -n 1; }

case "${MODE:-}" in strong|weak|hybrid|hybrid-weak) ;; *) die "MODE must be strong, weak, hybrid or hybrid-weak" ;; esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dry_run="${GPIPE_DRY_RUN:-0}"
ntasks="${SLURM_NTASKS:?run this script with sbatch (or set GPIPE_DRY_RUN=1 and SLURM_NTASKS)}"
MS="${MS:-${M:-}}"
[ -n "$MS" ] || die "set M, the number of micro-batches (sbatch --export=ALL,M=8 ...), or MS=\"1 4 16\""
REPEATS="${REPEATS:-1}"
DECK="${DECK:-inputs/deep_mlp.yaml}"
OUT="${OUT:-runs/$MODE-slurm}"
GPIPE_TRAIN="${GPIPE_TRAIN:-build/apps/gpipe-train}"
[ -f "$DECK" ] || die "$DECK: no such deck"
is_int "$ntasks" || die "SLURM_NTASKS: '$ntasks' is not a positive integer"
# The points "D K" of this job: ranks D x K each
points=()
case "$MODE" in
  strong|weak)
    KS="${KS:-$ntasks}"
    for k in $KS; do
      is_int "$k" || die "KS: '$k' is not a positive integer"
      [ "$k" -le "$ntasks" ] || die "K = $k > the job's $ntasks tasks (sbatch --ntasks)"
      points+=("1 $k")
    done ;;
  hybrid)
    if [ -z "${KS:-}" ]; then
      KS=""; for ((k = 1; k <= ntasks; k++)); do [ $((ntasks % k)) -ne 0 ] || KS="$KS $k"; done
    fi
    for k in $KS; do
      is_int "$k" || die "KS: '$k' is not a positive integer"
      [ $((ntasks % k)) -eq 0 ] || die "K = $k does not divide the job's $ntasks tasks (D = ranks / K)"
      points+=("$((ntasks / k)) $k")
    done ;;
  hybrid-weak)
    CELLS="${CELLS:-1}"
    is_int "$CELLS" || die "CELLS: '$CELLS' is not a positive integer"
    [ "$CELLS" -le "$ntasks" ] || die "CELLS = $CELLS > the job's $ntasks tasks"
    if [ -z "${DS:-}" ]; then
      dmax=$((ntasks / CELLS)); DS=""
      for ((d = 1; d < dmax; d *= 2)); do DS="$DS $d"; done
      DS="$DS $dmax"
    fi
    for d in $DS; do
      is_int "$d" || die "DS: '$d' is not a positive integer"
      [ $((d * CELLS)) -le "$ntasks" ] || die "D x K = $d x $CELLS > the job's $ntasks tasks (sbatch --ntasks)"
      points+=("$d $CELLS")
    done ;;
esac
for m in $MS; do is_int "$m" || die "M: '$m' is not a positive integer"; done
is_int "$REPEATS" || die "REPEATS must be a positive integer, not '$REPEATS'"
if [ "$MODE" = strong ] || [ "$MODE" = hybrid ]; then
  batch="${N:-$(deck_value batch_size)}"
else
  batch="${N0:-$(deck_value batch_size)}"
fi
[ -n "$batch" ] || die "$DECK: no batch_size found; set N (strong, hybrid) or N0 (weak, hybrid-weak)"
TRAIN_LIMIT="${TRAIN_LIMIT:-$(deck_value train_limit)}"
TRAIN_LIMIT="${TRAIN_LIMIT:-0}"
if [[ "$MODE" == *weak ]] && [ "$TRAIN_LIMIT" != 0 ] && [ -z "${DATASET_SAMPLES:-}" ]; then
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
c = s.get("communication") or {}
overlap = c.get("allreduce_overlap_fraction")
overlap = f", all-reduce overlap {overlap:.3f}" if s.get("replicas", 1) > 1 and overlap is not None else ""
print(f"{s['samples_per_second']:.1f} samples/s{overlap}, load {'n/a' if load is None else f'{load:.2f}'}")
got = s.get("train_samples")
if limit and got is not None and got < limit:
    print(f"CAPPED: data.train_limit = {limit} but only {got} samples were trained on", file=sys.stderr)
    sys.exit(3)
EOF
}

mkdir -p "$OUT"
if [ "$dry_run" != 1 ] && [ ! -f "$OUT/study.json" ]; then  # for scripts/plot_scaling.py OUT
  python3 - "$OUT/study.json" "$MODE" "$batch" "$DECK" "$ntasks" "${CELLS:-}" <<'EOF'
import json, sys, time
path, mode, n0, deck, ranks, cells = sys.argv[1:]
study = {"mode": mode, "N0": int(n0), "deck": deck, "max_ranks": int(ranks), "launcher": "slurm",
         "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
if cells:
    study["cells"] = int(cells)
json.dump(study, open(path, "w"), indent=2)
EOF
fi
failed=0
if [[ "$MODE" == hybrid* ]]; then what="$(printf '%s, ' "${points[@]/ /x}")"; what="D x K in {${what%, }}"
else what="K in {$KS}"; fi
echo "$MODE scaling job ${SLURM_JOB_ID:-(none)}: $what, M in {$MS}, $REPEATS repeat(s), deck $DECK -> $OUT"
for point in "${points[@]}"; do
  read -r d k <<<"$point"
  ranks=$((d * k))
  case "$MODE" in  # the factor of N0 and TRAIN_LIMIT
    weak) scale=$k; label="K=$k" ;;
    hybrid-weak) scale=$d; label="D=$d K=$k" ;;
    hybrid) scale=1; label="D=$d K=$k" ;;
    *) scale=1; label="K=$k" ;;
  esac
  n=$((batch * scale))
  limit=()
  want=0
  if [[ "$MODE" == *weak ]] && [ "$TRAIN_LIMIT" != 0 ]; then
    want=$((TRAIN_LIMIT * scale))
    if [ "${DATASET_SAMPLES:-0}" -gt 0 ] && [ "$want" -gt "$DATASET_SAMPLES" ]; then
      echo "$label: REFUSED: weak scaling needs data.train_limit = $TRAIN_LIMIT*$scale = $want samples but" \
           "the training data holds $DATASET_SAMPLES (lower TRAIN_LIMIT to $((DATASET_SAMPLES / scale)) or less)" >&2
      failed=$((failed + 1))
      continue
    fi
    limit=(--set "data.train_limit=$want")
  fi
  grid=()
  prefix="K${k}"
  if [[ "$MODE" == hybrid* ]]; then grid=(--set "parallel.cells=$k"); prefix="D${d}_K${k}"; fi
  nodes=$(( (ranks + per_node - 1) / per_node ))
  for m in $MS; do
    if [ $((d * m)) -gt "$n" ]; then
      echo "$label M=$m N=$n: skipped ($([ "$d" -eq 1 ] && echo "M > N" || echo "D x M > N"))"; continue
    fi
    for ((r = 1; r <= REPEATS; r++)); do
      name="$OUT/${prefix}_M${m}"
      [ "$REPEATS" -eq 1 ] || name="${name}_r$r"
      # shellcheck disable=SC2086  # SRUN_ARGS, EXTRA_ARGS and KOKKOS_ARGS are split on purpose
      cmd=(srun --ntasks="$ranks" --nodes="$nodes" "${step[@]}" ${SRUN_ARGS:-}
           "$GPIPE_TRAIN" "$DECK" --set "training.batch_size=$n" --set "training.micro_batches=$m"
           ${grid[@]+"${grid[@]}"} --summary "$name.json" --trace "$name.h5" ${EXTRA_ARGS:-}
           ${limit[@]+"${limit[@]}"} ${KOKKOS_ARGS:-})
      if [ "$dry_run" = 1 ]; then echo "${cmd[*]}"; continue; fi
      rm -f "$name.json" "$name.h5"
      if "${cmd[@]}" >"$name.log" 2>&1; then
        if line="$(summary_check "$name.json" "$want")"; then
          echo "$label M=$m N=$n run $r: $line"
        else
          echo "$label M=$m N=$n run $r: $line (see the warning above)"
          failed=$((failed + 1))
        fi
      else
        echo "$label M=$m N=$n run $r: FAILED (exit $?); see $name.log" >&2
        failed=$((failed + 1))
      fi
    done
  done
done
[ "$failed" -eq 0 ] || { echo "scaling_job.sh: $failed point(s) failed or were refused" >&2; exit 1; }

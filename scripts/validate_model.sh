#!/usr/bin/env bash
# Validation of the performance model (gpipe-plan) against measured runs:
# emulated pipelines (synthetic layers, K = 2..16 ranks sharing this
# machine's cores) at every K, M and schedule; the imbalance study; the real
# MLP decks at K = 1 and 2. See docs/performance-model.md, "Validation" and
# "Imbalance".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<EOF
usage: scripts/validate_model.sh [options]

Runs gpipe-train under mpirun and gpipe-plan --json for the same
configuration, one pair per point, each run writing
OUT/<part>_<deck>_K<k>_M<m>_<schedule>.{json,h5,log} and .plan.json; then
scripts/validate_model.py writes OUT/validation.csv (every point: predicted
and measured step time, samples/s and idle fraction, the relative error and
whether it is within its bound) and prints the rows outside it, and
scripts/plot_model.py draws OUT/validation.png and OUT/imbalance.png.

Parts (all by default):
  emulated   inputs/emulated_balanced.yaml at K = 2, 4, 8, 16, M = 1 .. 64 and
             every schedule; N = 64 K so every cell has the same emulated
             work per step (61 ms); bound: step time within 5 %
  imbalance  inputs/emulated_{balanced,imbalance_125,imbalance_150,imbalance_200}.yaml
             (max/mean cell time 1.0, 1.25, 1.5, 2.0) at K = 4, fill_drain and
             zero_bubble, M = 1, 4, 16, 64; bound 5 %
  real       inputs/fashion_mnist_mlp.yaml and inputs/deep_mlp.yaml at K = 1
             and 2 with their own M; bound: samples/s within 10 %. gpipe-plan
             predicts with layer times it measures first on this machine
             (--calibrate OUT/<point>.costs.h5) when it has that option

Emulated runs use mpirun --oversubscribe --mca mpi_yield_when_idle 1 (Open
MPI; a waiting rank otherwise spins and takes the cores the sleeping ranks'
wake-ups need: 10x slower steps at K = 16). Measured step time: the median
time from one step's start to the next's on each rank (without the first,
warm-up, step), median over ranks; idle fraction: 1 - (mean compute time per
rank and step) / step time, from the traces.

options:
  --quick           a subset: K = 2, 4, 16; M = 1, 4, 16, 64; imbalance at M = 4, 16;
                    the real decks at K = 2 only (about 2 minutes; all: about 5)
  --parts "LIST"    parts to run (default "emulated imbalance real")
  --steps S         training steps per run, the first a warm-up (default 8)
  --out DIR         output folder (default runs/validate-YYYYmmdd-HHMMSS)
  --resume          keep the points of DIR that have a summary and a plan
  --replan          keep the measured runs of DIR, redo every prediction (e.g.
                    with other PLAN_ARGS) and the analysis
  --dry-run         print the commands, run nothing
  -h, --help        this help

environment: GPIPE_TRAIN, GPIPE_PLAN (default build/apps/gpipe-{train,plan}),
MPIRUN (default mpirun), MPIRUN_ARGS (more launcher options), PLAN_ARGS
(more gpipe-plan options for every point, e.g. "--latency-us 50"),
PLAN_ARGS_REAL (more gpipe-plan options for the real decks, e.g. a
calibration), PYTHON (with h5py; matplotlib for the plots).
Timings are sleep-based for the emulated parts (robust to other load, but
label them with the load the summary records); the real decks compute, so
measure them on a quiet machine.
EOF
}

die() { echo "validate_model.sh: error: $*" >&2; exit 2; }

quick=false; parts="emulated imbalance real"; steps=8; out=""; resume=false; replan=false; dry_run=false
need() { if [ $# -lt 2 ] || [ -z "$2" ] || [[ "$2" == --* ]]; then die "$1 needs a value"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=true; shift ;;
    --parts) need "$@"; parts="$2"; shift 2 ;;
    --steps) need "$@"; steps="$2"; shift 2 ;;
    --out) need "$@"; out="$2"; shift 2 ;;
    --resume) resume=true; shift ;;
    --replan) replan=true; resume=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$steps" =~ ^[0-9]+$ ]] && [ "$steps" -ge 3 ] ||
  die "--steps must be an integer >= 3 (a warm-up step, then measured ones), not '$steps'"
for p in $parts; do
  case "$p" in emulated|imbalance|real) ;; *) die "--parts: unknown part '$p' (emulated, imbalance, real)" ;; esac
done

if $quick; then
  cells="2 4 16"; mbs="1 4 16 64"; imb_mbs="4 16"; real_cells="2"
else
  cells="2 4 8 16"; mbs="1 2 4 8 16 32 64"; imb_mbs="1 4 16 64"; real_cells="1 2"
fi
schedules="fill_drain 1f1b zero_bubble"
out="${out:-runs/validate-$(date +%Y%m%d-%H%M%S)}"

train="${GPIPE_TRAIN:-$root/build/apps/gpipe-train}"
plan="${GPIPE_PLAN:-$root/build/apps/gpipe-plan}"
for b in "$train" "$plan"; do
  [ -x "$b" ] || $dry_run || die "$b: not found or not executable (build first: cmake --build build)"
done
mpirun="${MPIRUN:-mpirun}"
launcher=("$mpirun")
if [[ "$("$mpirun" --version 2>&1 || true)" == *"Open MPI"* ]]; then
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  launcher+=(--oversubscribe --mca mpi_yield_when_idle 1 -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
fi
# shellcheck disable=SC2206  # split on purpose
launcher+=(${MPIRUN_ARGS:-})
# shellcheck disable=SC2206
plan_args=(${PLAN_ARGS:-})
# shellcheck disable=SC2206
plan_args_real=(${PLAN_ARGS_REAL:-})
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import h5py' 2>/dev/null; then py="$p"; break; fi
done
[ -n "$py" ] || $dry_run || die "no python3 with h5py (set PYTHON)"

cd "$root"
if [[ " $parts " == *" emulated "* || " $parts " == *" imbalance "* ]] && ! $dry_run &&
   [ ! -f data/emulated_train.h5 ]; then
  "$py" scripts/make_emulated_data.py data
fi
if ! $dry_run; then
  mkdir -p "$out"
  { echo "parts: $parts"; echo "quick: $quick"; echo "steps: $steps"
    echo "gpipe_train: $train"; echo "gpipe_plan: $plan"; echo "plan_args: ${plan_args[*]+${plan_args[*]}}"
    echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"; } >> "$out/study.txt"
fi

calibrate=false
if [ -x "$plan" ] && "$plan" --help 2>/dev/null | grep -q -- --calibrate; then calibrate=true; fi
batch_of() { sed -n 's/^[[:space:]]*batch_size:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$1" | head -n 1; }
failed=0
# run_point PART DECK K M SCHEDULE N [extra plan args...]: one measured run and its prediction.
run_point() {
  local part="$1" deck="$2" k="$3" m="$4" schedule="$5" n="$6"; shift 6
  local name="${part}_$(basename "$deck" .yaml)_K${k}_M${m}_${schedule}"
  local sets=(--set training.batch_size="$n" --set training.micro_batches="$m"
              --set pipeline.schedule="$schedule" --set parallel.cells="$k")
  local args=("$deck" "${sets[@]}" --set training.epochs=1 --set data.train_limit=$((n * steps))
              --set data.test_limit="$n" --set training.progress_every=0 --set trace.every=1
              --quiet --trace "$out/$name.h5" --summary "$out/$name.json")
  local pargs=("$deck" "${sets[@]}" --ranks "$k" --json ${plan_args[@]+"${plan_args[@]}"} "$@")
  if $dry_run; then
    echo "${launcher[*]} -n $k $train ${args[*]}"; echo "$plan ${pargs[*]}"; return
  fi
  if $resume && [ -f "$out/$name.json" ] && [ -s "$out/$name.plan.json" ] && ! $replan; then return; fi
  local t0=$SECONDS
  if ! "$plan" "${pargs[@]}" > "$out/$name.plan.json" 2> "$out/$name.plan.log"; then
    echo "$name: gpipe-plan FAILED (see $out/$name.plan.log)" >&2; failed=1
  fi
  if $resume && [ -f "$out/$name.json" ]; then return; fi
  if "${launcher[@]}" -n "$k" "$train" "${args[@]}" > "$out/$name.log" 2>&1; then
    echo "$name: done in $((SECONDS - t0)) s"
  else
    echo "$name: FAILED (see $out/$name.log)" >&2; failed=1
  fi
}

for part in $parts; do
  case "$part" in
    emulated)
      for k in $cells; do for m in $mbs; do for s in $schedules; do
        run_point emulated inputs/emulated_balanced.yaml "$k" "$m" "$s" $((64 * k))
      done; done; done ;;
    imbalance)
      for deck in balanced imbalance_125 imbalance_150 imbalance_200; do
        for m in $imb_mbs; do for s in fill_drain zero_bubble; do
          run_point imbalance "inputs/emulated_$deck.yaml" 4 "$m" "$s" 256
        done; done
      done ;;
    real)
      for deck in inputs/fashion_mnist_mlp.yaml inputs/deep_mlp.yaml; do
        n="$(batch_of "$deck")"
        m="$(sed -n 's/^[[:space:]]*micro_batches:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$deck" | head -n 1)"
        for k in $real_cells; do
          name="real_$(basename "$deck" .yaml)_K${k}_M${m:-1}_fill_drain"
          calibration=()
          $calibrate && calibration=(--calibrate "$out/$name.costs.h5")
          run_point real "$deck" "$k" "${m:-1}" fill_drain "$n" ${calibration[@]+"${calibration[@]}"} \
            ${plan_args_real[@]+"${plan_args_real[@]}"}
        done
      done ;;
  esac
done
$dry_run && exit 0

"$py" "$root/scripts/validate_model.py" "$out" || failed=1
"$py" "$root/scripts/plot_model.py" "$out" || echo "validate_model.sh: no plots (matplotlib?)" >&2
exit "$failed"

#!/usr/bin/env bash
# Submits a GPipe scaling study to Slurm: one job per K (ranks) and M
# (micro-batches), or one job sweeping them all (--one-job), running
# scripts/slurm/{strong,weak}_scaling.sbatch; hybrid data x pipeline studies
# as one job (scripts/slurm/hybrid{,_weak}_scaling.sbatch).
# See docs/scaling-studies.md, "On a Slurm cluster".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

usage() {
  cat <<'EOF'
usage: scripts/slurm/submit_study.sh strong|weak|hybrid|hybrid-weak [options] [-- extra gpipe-train args]

Submits one job per K and M with scripts/slurm/MODE_scaling.sbatch (or, with
--one-job, one job of max(K) ranks that runs every point as a job step) and
writes OUT/study.json. Each point writes OUT/K{k}_M{m}.json, .h5 and .log
(K{k}_M{m}_r{r}.* with --repeats); the job log is OUT/*-JOBID.out. A job with
K ranks gets ceil(K/T) nodes with at most T ranks each and, when G > 0, one GPU
per rank. Combinations with M > N are skipped. Weak scaling also scales
data.train_limit with K and refuses a K whose limit exceeds the training data
(see weak_scaling.sbatch). When the jobs are done:  scripts/plot_scaling.py OUT

hybrid: one job of P = --ranks ranks (a single value) that runs every split
D x K (K = parallel.cells dividing P, or the values of --cells) and M as job
steps. hybrid-weak: one job of max(D) x K ranks, K = --cells (one value,
default 1), that runs D = each of --replicas with N = N0*D (and
data.train_limit scaled by D). Points are OUT/D{d}_K{k}_M{m}.*; plot_scaling.py
OUT writes OUT/hybrid.csv and OUT/hybrid.png.

options:
  --ranks "LIST"          values of K (default "1 2 4 8"); hybrid: the one rank count P
  --cells "LIST"          hybrid: values of K (default: every divisor of P);
                          hybrid-weak: the one K (default 1)
  --replicas "LIST"       hybrid-weak: values of D (default "1 2 4 8")
  --micro-batches "LIST"  values of M (default "1 4 16 32")
  --tasks-per-node T      ranks per node (default: $TASKS_PER_NODE, else 4)
  --gpus-per-node G       GPUs per node, 0 for CPU builds (default: $GPUS_PER_NODE,
                          else 0); GPU runs need one GPU per rank, so G >= T
  --deck FILE             input deck (default inputs/deep_mlp.yaml)
  --batch N               N (strong) or N0 (weak: N = N0*K); default: the deck's
  --out DIR               output folder (default runs/MODE-slurm-YYYYmmdd-HHMMSS)
  --repeats R             runs per point (default 1); plot_scaling.py takes the median
  --one-job               one job for all points instead of one job per point
  --sbatch-args "ARGS"    more sbatch options (default: $SBATCH_ARGS), e.g.
                          "--partition=gpu --account=abc123 --time=00:20:00"
  --dry-run               print the sbatch commands, submit nothing
  -h, --help              this help
  -- ARGS                 passed to every gpipe-train run (words without spaces)

environment passed to the jobs: GPIPE_TRAIN (default build/apps/gpipe-train),
KOKKOS_ARGS, SRUN_ARGS, MODULES (see the .sbatch files).
EOF
}

die() { echo "submit_study.sh: error: $*" >&2; exit 2; }

[ $# -gt 0 ] || { usage >&2; exit 2; }
case "$1" in
  -h|--help) usage; exit 0 ;;
  strong|weak|hybrid|hybrid-weak) mode="$1"; shift ;;
  *) die "first argument must be strong, weak, hybrid or hybrid-weak, not '$1' (see --help)" ;;
esac
ranks="1 2 4 8"; mbs="1 4 16 32"; tpn="${TASKS_PER_NODE:-4}"; gpn="${GPUS_PER_NODE:-0}"
deck="$root/inputs/deep_mlp.yaml"; batch=""; out=""; sbatch_args="${SBATCH_ARGS:-}"; dry_run=false
repeats=1; one_job=false; cells=""; replicas="1 2 4 8"
extra=()
need() { if [ $# -lt 2 ] || [ -z "$2" ] || [[ "$2" == --* && "$1" != --sbatch-args ]]; then die "$1 needs a value"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) need "$@"; ranks="$2"; shift 2 ;;
    --cells) need "$@"; cells="$2"; shift 2 ;;
    --replicas) need "$@"; replicas="$2"; shift 2 ;;
    --micro-batches) need "$@"; mbs="$2"; shift 2 ;;
    --tasks-per-node) need "$@"; tpn="$2"; shift 2 ;;
    --gpus-per-node) need "$@"; gpn="$2"; shift 2 ;;
    --deck) need "$@"; deck="$2"; shift 2 ;;
    --batch) need "$@"; batch="$2"; shift 2 ;;
    --out) need "$@"; out="$2"; shift 2 ;;
    --sbatch-args) need "$@"; sbatch_args="$2"; shift 2 ;;
    --repeats) need "$@"; repeats="$2"; shift 2 ;;
    --one-job) one_job=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see --help; gpipe-train options go after --)" ;;
  esac
done
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
for k in $ranks; do is_int "$k" || die "--ranks: '$k' is not a positive integer"; done
for m in $mbs; do is_int "$m" || die "--micro-batches: '$m' is not a positive integer"; done
is_int "$repeats" || die "--repeats must be a positive integer, not '$repeats'"
is_int "$tpn" || die "--tasks-per-node must be a positive integer, not '$tpn'"
[[ "$gpn" =~ ^[0-9]+$ ]] || die "--gpus-per-node must be a number, not '$gpn'"
if [ "$gpn" -gt 0 ] && [ "$gpn" -lt "$tpn" ]; then
  die "$gpn GPUs per node for $tpn ranks per node: GPU runs need one GPU per rank (lower --tasks-per-node)"
fi
[ -f "$deck" ] || die "$deck: no such deck"
for a in ${extra[@]+"${extra[@]}"}; do
  case "$a" in
    training.batch_size=*|training.micro_batches=*|trace.file=*|parallel.cells=*|--summary*|--trace*)
      die "'$a' is set by the study (see --batch, --micro-batches, --out)" ;;
    *' '*) die "'$a': arguments after -- cannot contain spaces (they travel in EXTRA_ARGS)" ;;
  esac
done
if [ -z "$batch" ]; then
  batch="$(sed -n 's/^[[:space:]]*batch_size:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$deck" | head -n 1)"
  [ -n "$batch" ] || die "$deck: no 'batch_size:' line found; pass --batch"
fi
is_int "$batch" || die "--batch must be a positive integer, not '$batch'"
out="${out:-runs/$mode-slurm-$(date +%Y%m%d-%H%M%S)}"
[ ! -f "$out/study.json" ] || $dry_run || die "$out already holds a study; choose another --out"
script="$root/scripts/slurm/${mode//-/_}_scaling.sbatch"
if [ "$mode" = hybrid ]; then
  [ "$(wc -w <<<"$ranks")" -eq 1 ] || die "hybrid: --ranks takes one rank count P, not '$ranks'"
  for k in $cells; do
    is_int "$k" || die "--cells: '$k' is not a positive integer"
    [ $((ranks % k)) -eq 0 ] || die "--cells: K = $k does not divide the $ranks ranks"
  done
elif [ "$mode" = hybrid-weak ]; then
  cells="${cells:-1}"
  is_int "$cells" || die "hybrid-weak: --cells takes one K, not '$cells'"
  for d in $replicas; do is_int "$d" || die "--replicas: '$d' is not a positive integer"; done
  ranks=""; for d in $replicas; do ranks="$ranks $((d * cells))"; done  # for study.json
fi
command -v sbatch >/dev/null || $dry_run || die "sbatch not found (not on a Slurm login node?)"

if ! $dry_run; then
  mkdir -p "$out"
  REPEATS="$repeats" python3 - "$out/study.json" "$mode" "$batch" "$deck" "$ranks" "$mbs" "$tpn" "$gpn" \
      ${extra[@]+"${extra[@]}"} <<'EOF'
import json, sys, time
path, mode, n0, deck, ranks, mbs, tpn, gpn, *extra = sys.argv[1:]
json.dump({"mode": mode, "N0": int(n0), "deck": deck, "ranks": [int(k) for k in ranks.split()],
           "repeats": int(__import__("os").environ["REPEATS"]),
           "max_ranks": max(int(k) for k in ranks.split()),
           "micro_batches": [int(m) for m in mbs.split()], "tasks_per_node": int(tpn),
           "gpus_per_node": int(gpn), "launcher": "slurm", "extra_args": extra,
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, open(path, "w"), indent=2)
EOF
fi

export DECK="$deck" OUT="$out" GPIPE_TRAIN="${GPIPE_TRAIN:-$root/build/apps/gpipe-train}"
export GPIPE_ROOT="$root" REPEATS="$repeats"
export EXTRA_ARGS="${extra[*]+${extra[*]}}"
for a in ${extra[@]+"${extra[@]}"}; do  # weak: data.train_limit=L0 after -- is scaled by K
  if [[ "$a" == data.train_limit=* ]]; then export TRAIN_LIMIT="${a#data.train_limit=}"; fi
done
if [[ "$mode" == *weak ]]; then  # never ask for more samples than the data holds
  limit0="${TRAIN_LIMIT:-$(sed -n 's/^[[:space:]]*train_limit:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$deck" | head -n 1)}"
  # shellcheck disable=SC2086
  export DATASET_SAMPLES="${DATASET_SAMPLES:-$(python3 "$root/scripts/dataset_samples.py" "$deck" $EXTRA_ARGS 2>/dev/null || echo 0)}"
  factors="$ranks"; name=K  # data.train_limit = L0 x K (weak) or L0 x D (hybrid-weak)
  if [ "$mode" = hybrid-weak ]; then factors="$replicas"; name=D; fi
  for k in $factors; do
    if [ "${limit0:-0}" -gt 0 ] && [ "$DATASET_SAMPLES" -gt 0 ] && [ $((limit0 * k)) -gt "$DATASET_SAMPLES" ]; then
      die "weak scaling at $name=$k needs data.train_limit = $limit0*$k = $((limit0 * k)) samples but the training data holds $DATASET_SAMPLES; lower it to $((DATASET_SAMPLES / k)) or less (data.train_limit=L0 after --) or drop $name=$k"
    fi
  done
fi
one_job() {  # JOB_NAME RANKS LOG WHAT ENV: one job of RANKS ranks, every point a job step
  local nodes=$(( ($2 + tpn - 1) / tpn )) per_node=$(( $2 < tpn ? $2 : tpn )) id
  local cmd=(sbatch --parsable --job-name="$1" --nodes="$nodes" --ntasks="$2" --ntasks-per-node="$per_node"
             --output="$3")
  if [ "$gpn" -gt 0 ]; then cmd+=(--gpus-per-node="$per_node"); fi
  # shellcheck disable=SC2206  # more sbatch options, split on purpose
  cmd+=($sbatch_args "$script")
  if $dry_run; then echo "$4, M in {$mbs}: $5 ${cmd[*]}"; exit 0; fi
  id="$("${cmd[@]}")"
  echo "one job $id: $4, M in {$mbs}, $repeats repeat(s) ($nodes node(s), $per_node ranks per node)"
  echo "when it is done (squeue --me):  scripts/plot_scaling.py $out"
  exit 0
}
jobs=0
if [[ "$mode" == hybrid* ]]; then  # one job: every point is a job step of its allocation
  unset KS DS M N N0 CELLS
  export MS="$mbs"
  if [ "$mode" = hybrid ]; then
    p=$ranks; export N="$batch"; env="N=$batch"
    if [ -n "$cells" ]; then export KS="$cells"; env="KS=\"$cells\" $env"; fi
    what="D x K splits of $p ranks"
  else
    dmax=0; for d in $replicas; do [ "$d" -le "$dmax" ] || dmax="$d"; done
    p=$((dmax * cells)); export N0="$batch" CELLS="$cells" DS="$replicas"
    env="CELLS=$cells DS=\"$replicas\" N0=$batch"
    what="K = $cells, D in {$replicas}"
  fi
  one_job "gpipe-$mode" "$p" "$out/$mode-%j.out" "$what" "MS=\"$mbs\" REPEATS=$repeats $env"
fi
unset KS MS  # one point per job unless --one-job
if $one_job; then
  kmax=0
  for k in $ranks; do [ "$k" -le "$kmax" ] || kmax="$k"; done
  if [ "$mode" = strong ]; then export N="$batch"; env="N=$batch"; else export N0="$batch"; env="N0=$batch"; fi
  export KS="$ranks" MS="$mbs"
  one_job "gpipe-$mode-sweep" "$kmax" "$out/sweep-%j.out" "K in {$ranks}" \
          "KS=\"$ranks\" MS=\"$mbs\" REPEATS=$repeats $env"
fi
for k in $ranks; do
  n=$([ "$mode" = strong ] && echo "$batch" || echo $((batch * k)))
  nodes=$(( (k + tpn - 1) / tpn ))
  per_node=$(( k < tpn ? k : tpn ))
  for m in $mbs; do
    if [ "$m" -gt "$n" ]; then echo "K=$k M=$m N=$n: skipped (M > N)"; continue; fi
    cmd=(sbatch --parsable --job-name="gpipe-$mode-K$k-M$m" --nodes="$nodes" --ntasks="$k"
         --ntasks-per-node="$per_node" --output="$out/K${k}_M${m}-%j.out")
    if [ "$gpn" -gt 0 ]; then cmd+=(--gpus-per-node="$per_node"); fi
    # shellcheck disable=SC2206  # more sbatch options, split on purpose
    cmd+=($sbatch_args "$script")
    if [ "$mode" = strong ]; then export N="$n"; env="N=$n"; else export N0="$batch"; env="N0=$batch"; fi
    export M="$m"
    if $dry_run; then
      echo "K=$k M=$m: M=$m REPEATS=$repeats $env ${cmd[*]}"
    else
      id="$("${cmd[@]}")"
      echo "K=$k M=$m N=$n: job $id ($nodes node(s), $per_node ranks per node$([ "$gpn" -gt 0 ] && echo ", one GPU each"))"
    fi
    jobs=$((jobs + 1))
  done
done
$dry_run && exit 0
echo "$jobs job(s) submitted; when they are done (squeue --me):"
echo "  scripts/plot_scaling.py $out && scripts/plot_timeline.py $out/K<k>_M<m>.h5"

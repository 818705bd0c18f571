#!/usr/bin/env bash
# Local GPipe scaling study: gpipe-train under mpirun for K = 1..P ranks (or
# D x K splits of hybrid data x pipeline parallelism) and a list of
# micro-batch counts M, then the plots. See docs/scaling-studies.md.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cores="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"

usage() {
  cat <<EOF
usage: scripts/scaling_study.sh strong|weak|hybrid|hybrid-weak [options] [-- extra gpipe-train args]

Runs gpipe-train under mpirun for K = 1..P ranks (one pipeline cell per rank)
and every M of a list, then draws the plots:
  strong   fixed global mini-batch N (the deck's training.batch_size, or --batch)
  weak     N = N0*K (N0: the deck's training.batch_size, or --batch), and
           data.train_limit = L0*K (L0: the deck's, or data.train_limit=L0
           after --), so every run does the same number of steps; a study
           whose L0*P exceeds the training data is refused (not capped)
  hybrid   P = --max-ranks ranks, every split into D replicas x K cells
           (K divides P; parallel.cells=K), fixed global N
  hybrid-weak  K = --cells cells per replica, D = 1..P/K replicas on D*K
           ranks, N = N0*D and data.train_limit = L0*D (as weak, over D)
Hybrid runs are OUT/D{d}_K{k}_M{m}.* (_r{r} with --repeats); at the end
OUT/hybrid.csv (one row per point: samples/s, pipeline and data-parallel
communication, all-reduce overlap; columns in docs/scaling-studies.md) and
OUT/hybrid.png, both from scripts/plot_scaling.py.
Combinations with M > N are skipped. Every run writes OUT/K{k}_M{m}.json (run
summary), OUT/K{k}_M{m}.h5 (trace) and OUT/K{k}_M{m}.log (its output), or
K{k}_M{m}_r{r}.* with --repeats; OUT/study.json records the study. Each
summary records the machine load at the start of its run (machine_load). At the end: OUT/scaling.png
(scripts/plot_scaling.py, which also prints the table) and, for the largest K,
OUT/timeline_K{k}_M{m}.png (scripts/plot_timeline.py). A failed run is
reported and the study goes on; the exit status is 1 if any run failed.

options:
  --max-ranks P           largest K; hybrid: the ranks; hybrid-weak: the most
                          ranks D*K (default: the number of cores, here $cores)
  --cells K               hybrid-weak: cells per replica (default 1)
  --micro-batches "LIST"  values of M (default "1 2 4 8")
  --deck FILE             input deck (default inputs/deep_mlp.yaml)
  --batch N               N (strong) or N0 (weak); default: the deck's batch_size
  --out DIR               output folder (default runs/MODE-YYYYmmdd-HHMMSS)
  --repeats R             run every point R times (default 1); the plot takes the
                          median and shows the spread
  --resume                keep the runs of DIR that have a summary, do the others
  --dry-run               print the commands, run nothing
  -h, --help              this help
  -- ARGS                 passed to every gpipe-train run (not batch_size,
                          micro_batches, --summary or --trace: set above)

environment: GPIPE_TRAIN (default build/apps/gpipe-train), MPIRUN (default
mpirun), MPIRUN_ARGS (more launcher options, split on spaces), PYTHON (for the
plots; needs h5py and matplotlib), OPENBLAS_NUM_THREADS and OMP_NUM_THREADS
(default 1: one core per rank). With Open MPI, --allow-run-as-root is added
when run as root and --oversubscribe when K exceeds the cores (timings are
then not meaningful).

example, a short strong-scaling study (a few minutes on 2 cores):
  scripts/scaling_study.sh strong --max-ranks 2 --micro-batches "1 4" \\
      --out runs/quick -- --set data.train_limit=2560 --set data.test_limit=256
EOF
}

die() { echo "scaling_study.sh: error: $*" >&2; exit 2; }
warn() { echo "scaling_study.sh: warning: $*" >&2; }

# ---- arguments
[ $# -gt 0 ] || { usage >&2; exit 2; }
case "$1" in
  -h|--help) usage; exit 0 ;;
  strong|weak|hybrid|hybrid-weak) mode="$1"; shift ;;
  *) die "first argument must be strong, weak, hybrid or hybrid-weak, not '$1' (see --help)" ;;
esac
max_ranks="$cores"; mbs="1 2 4 8"; deck="$root/inputs/deep_mlp.yaml"; batch=""; out=""
resume=false; dry_run=false; extra=(); repeats=1; cells=1
need() { if [ $# -lt 2 ] || [ -z "$2" ] || [[ "$2" == --* ]]; then die "$1 needs a value"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --max-ranks) need "$@"; max_ranks="$2"; shift 2 ;;
    --micro-batches) need "$@"; mbs="$2"; shift 2 ;;
    --cells) need "$@"; cells="$2"; shift 2 ;;
    --deck) need "$@"; deck="$2"; shift 2 ;;
    --batch) need "$@"; batch="$2"; shift 2 ;;
    --out) need "$@"; out="$2"; shift 2 ;;
    --repeats) need "$@"; repeats="$2"; shift 2 ;;
    --resume) resume=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see --help; gpipe-train options go after --)" ;;
  esac
done
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_int "$repeats" || die "--repeats must be a positive integer, not '$repeats'"
is_int "$max_ranks" || die "--max-ranks must be a positive integer, not '$max_ranks'"
is_int "$cells" || die "--cells must be a positive integer, not '$cells'"
[ "$cells" -le "$max_ranks" ] || die "--cells $cells exceeds --max-ranks $max_ranks"
for m in $mbs; do is_int "$m" || die "--micro-batches: '$m' is not a positive integer"; done
[ -n "${mbs// /}" ] || die "--micro-batches is empty"
[ -f "$deck" ] || die "$deck: no such deck"
for a in ${extra[@]+"${extra[@]}"}; do
  case "$a" in
    training.batch_size=*|training.micro_batches=*|trace.file=*|parallel.cells=*) die "'$a' is set by the study (see --batch, --micro-batches, --out)" ;;
    --summary*|--trace*) die "'$a' is chosen by the study; remove it from the arguments after --" ;;
  esac
done
if [ -z "$batch" ]; then
  batch="$(sed -n 's/^[[:space:]]*batch_size:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$deck" | head -n 1)"
  [ -n "$batch" ] || die "$deck: no 'batch_size:' line found; pass --batch"
fi
is_int "$batch" || die "--batch must be a positive integer, not '$batch'"
# Weak scaling keeps the number of steps too: data.train_limit = L0*K, with L0
# the last data.train_limit=L0 after --, else the deck's (0: all data, kept).
limit0="$(sed -n 's/^[[:space:]]*train_limit:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$deck" | head -n 1)"
for a in ${extra[@]+"${extra[@]}"}; do
  if [[ "$a" == data.train_limit=* ]]; then limit0="${a#data.train_limit=}"; fi
done
limit0="${limit0:-0}"
if [[ "$mode" == *weak ]] && [ "$limit0" != 0 ]; then  # never ask for more samples than the data holds
  scale=$max_ranks; what="K=$max_ranks"  # the largest factor of N0 and L0
  if [ "$mode" = hybrid-weak ]; then scale=$((max_ranks / cells)); what="D=$scale"; fi
  samples="${DATASET_SAMPLES:-$(python3 "$root/scripts/dataset_samples.py" "$deck" ${extra[@]+"${extra[@]}"} 2>/dev/null || echo 0)}"
  if [ "$samples" -gt 0 ] && [ $((limit0 * scale)) -gt "$samples" ]; then
    die "weak scaling to $what needs data.train_limit = $limit0*$scale = $((limit0 * scale)) samples but the training data holds $samples; pass data.train_limit=$((samples / scale)) (or less) after --, or a smaller --max-ranks"
  fi
fi
out="${out:-runs/$mode-$(date +%Y%m%d-%H%M%S)}"

# ---- tools
bin="${GPIPE_TRAIN:-$root/build/apps/gpipe-train}"
mpirun="${MPIRUN:-mpirun}"
trace=true
if [ -x "$bin" ]; then
  help="$("$bin" --help 2>&1 || true)"
  if [[ "$help" != *--trace* ]]; then
    trace=false; warn "$bin has no --trace option: runs write no trace, no timeline plots"
  fi
elif ! $dry_run; then
  die "$bin: not found or not executable (build with scripts/setup.sh, or set GPIPE_TRAIN)"
fi
command -v "$mpirun" >/dev/null || $dry_run || die "$mpirun: not found (install Open MPI or set MPIRUN)"
launcher=("$mpirun")
openmpi=false
if [[ "$("$mpirun" --version 2>&1 || true)" == *"Open MPI"* ]]; then
  openmpi=true
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  launcher+=(-x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
fi
# shellcheck disable=SC2206  # MPIRUN_ARGS is split on purpose
launcher+=(${MPIRUN_ARGS:-})
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

py=""  # an interpreter with h5py and matplotlib, for the plots
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import h5py, matplotlib' 2>/dev/null; then py="$p"; break; fi
done
pyjson="${py:-python3}"  # the summaries need only the standard library

# ---- output folder and study.json
if [ -f "$out/study.json" ] && ! $resume && ! $dry_run; then
  die "$out already holds a study; use --resume to complete it or choose another --out"
fi
if ! $dry_run; then
  mkdir -p "$out"
  REPEATS="$repeats" CELLS="$cells" "$pyjson" - "$out/study.json" "$mode" "$batch" "$deck" "$max_ranks" "$mbs" "$bin" \
      ${extra[@]+"${extra[@]}"} <<'EOF'
import json, os, sys, time
path, mode, n0, deck, p, mbs, binary, *extra = sys.argv[1:]
study = {"mode": mode, "N0": int(n0), "deck": deck, "max_ranks": int(p),
         "repeats": int(os.environ["REPEATS"]),
         "micro_batches": [int(m) for m in mbs.split()], "gpipe_train": binary,
         "extra_args": extra, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
if mode == "hybrid-weak":
    study["cells"] = int(os.environ["CELLS"])
if os.path.exists(path):
    old = json.load(open(path))
    for key in ("mode", "N0", "deck"):
        if old.get(key) != study[key]:
            sys.exit(f"scaling_study.sh: error: {path}: {key} is {old.get(key)!r}, "
                     f"this study has {study[key]!r}; choose another --out")
json.dump(study, open(path, "w"), indent=2)
EOF
fi

summary_line() {  # K M N json seconds requested_train_limit; status 3 if the limit was capped
  "$pyjson" - "$@" <<'EOF'
import json, sys
k, m, n, path, secs, limit = sys.argv[1:]
s = json.load(open(path))
measured = s.get("bubble_fraction_measured")
measured = "n/a" if measured is None else f"{measured:.3f}"
load = (s.get("machine_load") or {}).get("start")
load = "n/a" if load is None else f"{load:.2f}"
print(f"K={k} M={m} N={n}: {s['samples_per_second']:.1f} samples/s, bubble "
      f"{s['bubble_fraction_analytical']:.3f} analytical, {measured} measured, {secs} s, load {load}")
got = s.get("train_samples")
if int(limit) and got is not None and got < int(limit):
    print(f"    CAPPED: data.train_limit = {limit} but the run trained on {got} samples", file=sys.stderr)
    sys.exit(3)
EOF
}

base_cmd() {  # RANKS N M NAME: the launcher line of one run into cmd (more --set may follow)
  cmd=("${launcher[@]}")
  if $openmpi && [ "$1" -gt "$cores" ]; then cmd+=(--oversubscribe); fi
  cmd+=(-n "$1" "$bin" "$deck" --set "training.batch_size=$2" --set "training.micro_batches=$3"
        --summary "$4.json")
  if $trace; then cmd+=(--trace "$4.h5"); fi
}

report_failure() {  # LABEL STATUS SECONDS NAME: the run's error lines
  echo "$1: FAILED (exit $2) after $3 s; see $4.log:"
  local errors
  errors="$(grep -i 'error' "$4.log" | head -n 3 || true)"
  if [ -z "$errors" ]; then errors="$(tail -n 5 "$4.log")"; fi
  mapfile -t lines <<<"$errors"
  printf '    %s\n' "${lines[@]}"
}

hybrid_line() {  # D K M N json seconds requested_train_limit; status 3 if the limit was capped
  "$pyjson" - "$@" <<'EOF'
import json, sys
d, k, m, n, path, secs, limit = sys.argv[1:]
s = json.load(open(path))
c = s.get("communication", {})
def f(key, fmt):
    return format(c[key], fmt) if key in c else "n/a"
load = (s.get("machine_load") or {}).get("start")
load = "n/a" if load is None else f"{load:.2f}"
print(f"D={d} K={k} M={m} N={n}: {s['samples_per_second']:.1f} samples/s, pipeline comm "
      f"{f('pipeline_seconds_per_step', '.2e')} s/step, data-parallel comm "
      f"{f('data_parallel_seconds_per_step', '.2e')} s/step, all-reduce overlap "
      f"{f('allreduce_overlap_fraction', '.3f') if int(d) > 1 else 'n/a'}, {secs} s, load {load}")
got = s.get("train_samples")
if int(limit) and got is not None and got < int(limit):
    print(f"    CAPPED: data.train_limit = {limit} but the run trained on {got} samples", file=sys.stderr)
    sys.exit(3)
EOF
}

# ---- hybrid and hybrid-weak: D replicas x K cells (parallel.cells=K)
if [[ "$mode" == hybrid* ]]; then
  points=()  # "D K"
  if [ "$mode" = hybrid ]; then
    for ((k = 1; k <= max_ranks; k++)); do
      [ $((max_ranks % k)) -ne 0 ] || points+=("$((max_ranks / k)) $k")
    done
    echo "hybrid: $max_ranks ranks as D x K, M in {$mbs}, N = $batch, deck $deck -> $out"
  else
    for ((d = 1; d * cells <= max_ranks; d++)); do points+=("$d $cells"); done
    echo "hybrid-weak: K = $cells, D = 1..$((max_ranks / cells)), M in {$mbs}, N = $batch*D," \
         "data.train_limit = $limit0*D, deck $deck -> $out"
  fi
  failed=0
  for point in "${points[@]}"; do
    read -r d k <<<"$point"
    p=$((d * k)); n=$batch; want=0
    if [ "$mode" = hybrid-weak ]; then
      n=$((batch * d))
      [ "$limit0" = 0 ] || want=$((limit0 * d))
    fi
    for m in $mbs; do
      if [ $((d * m)) -gt "$n" ]; then echo "D=$d K=$k M=$m N=$n: skipped (D x M > N)"; continue; fi
      for ((r = 1; r <= repeats; r++)); do
        name="$out/D${d}_K${k}_M${m}"
        [ "$repeats" -eq 1 ] || name="${name}_r$r"
        if $resume && [ -f "$name.json" ]; then echo "D=$d K=$k M=$m: kept ($name.json exists)"; continue; fi
        base_cmd "$p" "$n" "$m" "$name"
        cmd+=(--set "parallel.cells=$k" ${extra[@]+"${extra[@]}"})
        if [ "$want" -gt 0 ]; then cmd+=(--set "data.train_limit=$want"); fi
        if $dry_run; then echo "${cmd[*]}"; continue; fi
        rm -f "$name.json" "$name.h5"
        start=$SECONDS
        if "${cmd[@]}" >"$name.log" 2>&1; then
          hybrid_line "$d" "$k" "$m" "$n" "$name.json" $((SECONDS - start)) "$want" || failed=$((failed + 1))
        else
          status=$?
          failed=$((failed + 1))
          report_failure "D=$d K=$k M=$m N=$n" "$status" $((SECONDS - start)) "$name"
        fi
      done
    done
  done
  $dry_run && exit 0
  # The table, OUT/hybrid.csv and (with matplotlib) OUT/hybrid.png
  plot_failed=0
  if compgen -G "$out/D*_K*_M*.json" >/dev/null; then
    if [ -n "$py" ]; then
      "$py" "$root/scripts/plot_scaling.py" "$out" || plot_failed=1
    else
      warn "no python3 with h5py and matplotlib (set PYTHON): the table and hybrid.csv only"
      "$pyjson" "$root/scripts/plot_scaling.py" "$out" --no-plot || plot_failed=1
    fi
  fi
  [ "$failed" -eq 0 ] || { echo "scaling_study.sh: $failed run(s) failed" >&2; exit 1; }
  [ "$plot_failed" -eq 0 ] || exit 1
  exit 0
fi

# ---- the runs
if [ "$mode" = strong ]; then sizes="N = $batch"; else sizes="N = $batch*K, data.train_limit = $limit0*K"; fi
echo "$mode scaling: K = 1..$max_ranks, M in {$mbs}, $sizes, deck $deck -> $out"
failed=0
for ((k = 1; k <= max_ranks; k++)); do
  n=$([ "$mode" = strong ] && echo "$batch" || echo $((batch * k)))
  for m in $mbs; do
   if [ "$m" -gt "$n" ]; then echo "K=$k M=$m N=$n: skipped (M > N)"; continue; fi
   for ((r = 1; r <= repeats; r++)); do
    name="$out/K${k}_M${m}"
    [ "$repeats" -eq 1 ] || name="${name}_r$r"
    if $resume && [ -f "$name.json" ]; then echo "K=$k M=$m N=$n: kept ($name.json exists)"; continue; fi
    base_cmd "$k" "$n" "$m" "$name"
    cmd+=(${extra[@]+"${extra[@]}"})
    want=0
    if [ "$mode" = weak ] && [ "$limit0" != 0 ]; then
      want=$((limit0 * k)); cmd+=(--set "data.train_limit=$want")
    fi
    if $dry_run; then echo "${cmd[*]}"; continue; fi
    rm -f "$name.json" "$name.h5"
    start=$SECONDS
    if "${cmd[@]}" >"$name.log" 2>&1; then
      summary_line "$k" "$m" "$n" "$name.json" $((SECONDS - start)) "$want" || failed=$((failed + 1))
    else
      status=$?
      failed=$((failed + 1))
      report_failure "K=$k M=$m N=$n" "$status" $((SECONDS - start)) "$name"
    fi
   done
  done
done
$dry_run && exit 0

# ---- plots
plot_failed=0
if [ -z "$py" ]; then
  warn "no python3 with h5py and matplotlib (set PYTHON); plot later with scripts/plot_scaling.py $out"
elif compgen -G "$out/K*_M*.json" >/dev/null; then
  "$py" "$root/scripts/plot_scaling.py" "$out" -o "$out/scaling.png" || plot_failed=1
  kmax=0
  for f in "$out"/K*_M*.h5; do
    [ -f "$f" ] || continue
    k="${f##*/K}"; k="${k%%_*}"
    [ "$k" -le "$kmax" ] || kmax="$k"
  done
  for m in $mbs; do
    f="$out/K${kmax}_M${m}.h5"
    [ -f "$f" ] || f="$out/K${kmax}_M${m}_r1.h5"  # --repeats: the first repeat
    if [ -f "$f" ]; then
      "$py" "$root/scripts/plot_timeline.py" "$f" -o "$out/timeline_K${kmax}_M${m}.png" >/dev/null \
        && echo "wrote $out/timeline_K${kmax}_M${m}.png" || plot_failed=1
    fi
  done
fi
[ "$failed" -eq 0 ] || { echo "scaling_study.sh: $failed run(s) failed" >&2; exit 1; }
[ "$plot_failed" -eq 0 ] || exit 1

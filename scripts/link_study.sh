#!/usr/bin/env bash
# Link study: throughput of a K = 2 pipeline against the bandwidth and latency
# of an emulated link (pipeline.link), for the quickstart and the deep deck
# and several M, then the table, the crossover bandwidths and the plot.
# See docs/scaling-studies.md, "How slow a link does a pipeline tolerate?".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<EOF
usage: scripts/link_study.sh [options] [-- extra gpipe-train args]

For every deck, every M and every (bandwidth, latency) pair, runs gpipe-train
on K = 2 ranks (one cell each) for a few steps with pipeline.link set, plus
one run without a link (compute-only) per deck and M; every run writes
OUT/<deck>_M<m>_<link>.{json,h5,log} (<link> = bw<Gb/s>_lat<us>, or
compute). Then scripts/link_study.py writes OUT/link_study.csv (samples/s,
idle fraction, overlap fraction, ...), OUT/crossover.csv (per deck and M:
the bandwidth where throughput falls to 90 % of compute-only, against bytes
per micro-batch / forward time per micro-batch) and OUT/link_study.png.
Throughput is the global mini-batch over the median step time (slowest rank),
without the first (warm-up) step. Runs go at nice 19. A failed run is
reported and the study goes on; the exit status is 1 if any run failed.

options:
  --decks "LIST"          decks (default: inputs/fashion_mnist_mlp.yaml inputs/deep_mlp.yaml)
  --micro-batches "LIST"  values of M (default "1 4 8 16")
  --bandwidths "LIST"     Gb/s (default "0.1 1 10 100")
  --latencies "LIST"      microseconds (default "2 20 200")
  --steps S               training steps per run, the first one a warm-up (default 5)
  --out DIR               output folder (default runs/link-YYYYmmdd-HHMMSS)
  --resume                keep the runs of DIR that have a summary, do the others
  --dry-run               print the commands, run nothing
  -h, --help              this help
  -- ARGS                 passed to every gpipe-train run

environment: GPIPE_TRAIN (default build/apps/gpipe-train), MPIRUN (default
mpirun), MPIRUN_ARGS (more launcher options, split on spaces), PYTHON (with
h5py; matplotlib for the plot), OPENBLAS_NUM_THREADS and OMP_NUM_THREADS
(default 1: one core per rank).

example (the documented study: 2 decks x 4 M x 13 runs):
  scripts/link_study.sh --out runs/link
EOF
}

die() { echo "link_study.sh: error: $*" >&2; exit 2; }

decks="$root/inputs/fashion_mnist_mlp.yaml $root/inputs/deep_mlp.yaml"
mbs="1 4 8 16"; bws="0.1 1 10 100"; lats="2 20 200"; steps=5; out=""; resume=false; dry_run=false
extra=()
need() { if [ $# -lt 2 ] || [ -z "$2" ] || [[ "$2" == --* ]]; then die "$1 needs a value"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --decks) need "$@"; decks="$2"; shift 2 ;;
    --micro-batches) need "$@"; mbs="$2"; shift 2 ;;
    --bandwidths) need "$@"; bws="$2"; shift 2 ;;
    --latencies) need "$@"; lats="$2"; shift 2 ;;
    --steps) need "$@"; steps="$2"; shift 2 ;;
    --out) need "$@"; out="$2"; shift 2 ;;
    --resume) resume=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see --help; gpipe-train options go after --)" ;;
  esac
done
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_num() { [[ "$1" =~ ^[0-9]*\.?[0-9]+$ ]]; }
{ is_int "$steps" && [ "$steps" -ge 2 ]; } ||
  die "--steps must be an integer >= 2 (a warm-up step, then measured ones), not '$steps'"
for m in $mbs; do is_int "$m" || die "--micro-batches: '$m' is not a positive integer"; done
for b in $bws; do
  { is_num "$b" && [ "$(awk "BEGIN{print ($b > 0)}")" = 1 ]; } || die "--bandwidths: '$b' is not a number > 0"
done
for l in $lats; do is_num "$l" || die "--latencies: '$l' is not a number >= 0"; done
for d in $decks; do [ -f "$d" ] || die "$d: no such deck"; done
out="${out:-runs/link-$(date +%Y%m%d-%H%M%S)}"
if [ -f "$out/study.txt" ] && ! $resume && ! $dry_run; then
  die "$out already holds a study; use --resume to complete it or choose another --out"
fi

bin="${GPIPE_TRAIN:-$root/build/apps/gpipe-train}"
[ -x "$bin" ] || $dry_run || die "$bin: not found or not executable (build first, or set GPIPE_TRAIN)"
mpirun="${MPIRUN:-mpirun}"
launcher=("$mpirun")
if [[ "$("$mpirun" --version 2>&1 || true)" == *"Open MPI"* ]]; then
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  launcher+=(--oversubscribe -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
fi
# shellcheck disable=SC2206  # MPIRUN_ARGS is split on purpose
launcher+=(${MPIRUN_ARGS:-})
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import h5py' 2>/dev/null; then py="$p"; break; fi
done

batch_of() { sed -n 's/^[[:space:]]*batch_size:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$1" | head -n 1; }

if ! $dry_run; then
  mkdir -p "$out"
  { echo "decks: $decks"; echo "micro_batches: $mbs"; echo "bandwidths_gbps: $bws"
    echo "latencies_us: $lats"; echo "steps: $steps"; echo "gpipe_train: $bin"
    echo "extra: ${extra[*]+${extra[*]}}"; echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"; } >> "$out/study.txt"
fi

failed=0
run_point() {  # deck name m [bandwidth latency]
  local deck="$1" name="$2" m="$3" bw="${4:-}" lat="${5:-}" n
  n="$(batch_of "$deck")"
  [ -n "$n" ] || die "$deck: no 'batch_size:' line found"
  local args=("$deck" --set training.micro_batches="$m" --set training.epochs=1
              --set data.train_limit=$((n * steps)) --set data.test_limit="$n"
              --set training.progress_every=0 --set trace.every=1
              --trace "$out/$name.h5" --summary "$out/$name.json")
  [ -z "$bw" ] || args+=(--set pipeline.link.bandwidth_gbps="$bw" --set pipeline.link.latency_us="$lat")
  args+=(${extra[@]+"${extra[@]}"})
  if $dry_run; then echo "nice -n 19 ${launcher[*]} -n 2 $bin ${args[*]}"; return; fi
  if $resume && [ -f "$out/$name.json" ]; then return; fi
  local t0=$SECONDS
  if nice -n 19 "${launcher[@]}" -n 2 "$bin" "${args[@]}" > "$out/$name.log" 2>&1; then
    echo "$name: done in $((SECONDS - t0)) s"
  else
    echo "$name: FAILED (see $out/$name.log)" >&2
    failed=1
  fi
}

for deck in $decks; do
  base="$(basename "$deck" .yaml)"
  for m in $mbs; do
    run_point "$deck" "${base}_M${m}_compute" "$m"
    for bw in $bws; do
      for lat in $lats; do
        run_point "$deck" "${base}_M${m}_bw${bw}_lat${lat}" "$m" "$bw" "$lat"
      done
    done
  done
done
$dry_run && exit 0

if [ -n "$py" ]; then
  "$py" "$root/scripts/link_study.py" "$out" || failed=1
else
  echo "link_study.sh: no python3 with h5py (set PYTHON); analyse later with scripts/link_study.py $out" >&2
fi
exit "$failed"

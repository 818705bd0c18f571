#!/usr/bin/env bash
# Issue 23's emulated targets (perf/README.md, "Issue 23: every schedule on
# the emulated balanced deck"): every schedule on the balanced emulated deck
# at K = 4, 8 (and 16), M = 2K and 4K, measured on the runner (gpipe-train
# with a trace of every step) beside gpipe-plan's prediction of the same
# point; then perf/schedules_emulated.py prints the tables.
#
# usage: perf/schedules_emulated.sh [OUT_DIR]     (default runs/schedules-emulated)
# environment:
#   CELLS       K values (default "4 8 16")
#   SCHEDULES   default "fill_drain 1f1b zero_bubble interleaved_1f1b zb_v dualpipe_v"
#               (interleaved_1f1b runs with pipeline.chunks = CHUNKS)
#   CHUNKS      v of interleaved_1f1b (default 2)
#   STEPS       training steps per run, the first a warm-up (default 6)
#   ROWS        rows per micro-batch (default 16): N = ROWS x M
#   SCALE       emulated time per sample x SCALE (default 10: F = I = W = 100 us
#               per sample and layer, 1.6 ms per layer and micro-batch of 16 rows,
#               long against a wake-up or a message hop; 1 is the deck's 10 us)
#   WAIT        pipeline.wait of the runs (default sleep: waiting ranks sleep
#               between MPI_Test calls instead of polling a core, so the rank
#               whose emulated op ends gets a core at once; spin to compare)
#   HOP_US      a second prediction of every point with gpipe-plan
#               --wait-hop-us HOP_US (default 200): the tables then give the
#               per-hop delay that would make the model's step the measured
#               one (0: skip)
#   PROBE       1: perf/wake_probe.py samples how late a sleeping thread
#               wakes up during each run (OUT/<point>.wake.json), and a third
#               prediction uses its hop_us (--wait-hop-us); default 0: under
#               load its hop_us (0.5-5 ms) over-prices the hop 2-10 x
#               (perf/README.md, "Issue 23: ZB-V's own order ...")
#   CALIBRATE   1 (default): after the runs, the per-hop delay measured from
#               1f1b's trace at each (K, M) (perf/hop_delay.py: send posted to
#               the waiting receiver's wake, mean) prices every OTHER schedule's
#               prediction at that point (gpipe-plan --wait-hop-us;
#               OUT/<point>.calibrated.json): a calibration from one run,
#               judged on the others (1f1b's own is in-sample and left out of
#               the count); 0: skip
#   GPIPE_TRAIN, GPIPE_PLAN (default build/apps/gpipe-{train,plan}), MPIRUN
#   (default mpirun), PYTHON (with h5py).
#
# The deck is inputs/emulated_balanced.yaml with each of its 16 layers split
# into two of half the time, x SCALE (32 layers of F = I = W = 10 SCALE us per
# sample), so
# K = 16 has the 2K = 32 stages the V schedules and interleaved_1f1b (v = 2)
# need; every cell then has the same emulated work. The layers sleep (they do
# not compute), so the runs are robust to other load on the cores, not immune
# to it: the summary records the load at each run's start and the tables
# print its range. Emulated runs use mpirun --oversubscribe --mca
# mpi_yield_when_idle 1 (as scripts/validate_model.sh), so K = 16 ranks share
# 2 cores. Each point writes OUT/K<k>_M<m>_<schedule>.{json,h5,log,plan.json};
# a point with a summary and a plan is kept on a rerun (delete OUT to redo).
# About 3.5 minutes at K = 4, 8, 16 on the 2-core development machine (SCALE 10).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=${1:-runs/schedules-emulated}
cells=${CELLS:-4 8 16}
schedules=${SCHEDULES:-fill_drain 1f1b zero_bubble interleaved_1f1b zb_v dualpipe_v}
chunks=${CHUNKS:-2}
steps=${STEPS:-6}
rows=${ROWS:-16}
scale=${SCALE:-10}
wait=${WAIT:-sleep}
hop_us=${HOP_US:-200}
probe=${PROBE:-0}
train="${GPIPE_TRAIN:-$root/build/apps/gpipe-train}"
plan="${GPIPE_PLAN:-$root/build/apps/gpipe-plan}"
for b in "$train" "$plan"; do
  [ -x "$b" ] || { echo "schedules_emulated.sh: $b not found (build first: cmake --build build)" >&2; exit 2; }
done
[[ "$steps" =~ ^[0-9]+$ ]] && [ "$steps" -ge 3 ] ||
  { echo "schedules_emulated.sh: STEPS must be an integer >= 3, not '$steps'" >&2; exit 2; }
mpirun="${MPIRUN:-mpirun}"
launcher=("$mpirun")
if [[ "$("$mpirun" --version 2>&1 || true)" == *"Open MPI"* ]]; then
  [ "$(id -u)" -ne 0 ] || launcher+=(--allow-run-as-root)
  launcher+=(--oversubscribe --mca mpi_yield_when_idle 1 -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import h5py' 2>/dev/null; then py="$p"; break; fi
done
[ -n "$py" ] || { echo "schedules_emulated.sh: no python3 with h5py (set PYTHON)" >&2; exit 2; }

cd "$root"
[ -f data/emulated_train.h5 ] || "$py" scripts/make_emulated_data.py data
mkdir -p "$out"
deck="$out/emulated_balanced_32.yaml"
"$py" perf/schedules_emulated.py --deck "$scale" > "$deck"
{ echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"
  echo "scale: $scale, wait: $wait, steps: $steps, rows: $rows, hop_us: $hop_us, probe: $probe"
  echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"; } >> "$out/study.txt"
failed=0
for k in $cells; do
  for m in $((2 * k)) $((4 * k)); do
    n=$((rows * m))
    for s in $schedules; do
      v=1
      [ "$s" != interleaved_1f1b ] || v=$chunks
      name="K${k}_M${m}_${s}"
      sets=(--set training.batch_size="$n" --set training.micro_batches="$m" --set pipeline.schedule="$s"
            --set pipeline.chunks="$v" --set parallel.cells="$k" --set pipeline.wait="$wait")
      if [ "$hop_us" != 0 ] && [ ! -s "$out/$name.hop.json" ]; then
        "$plan" "$deck" "${sets[@]}" --ranks "$k" --wait-hop-us "$hop_us" --json > "$out/$name.hop.json" 2> "$out/$name.hop.log" ||
          rm -f "$out/$name.hop.json"
      fi
      [ -f "$out/$name.json" ] && [ -s "$out/$name.plan.json" ] && continue
      "$plan" "$deck" "${sets[@]}" --ranks "$k" --json > "$out/$name.plan.json" 2> "$out/$name.plan.log" ||
        { echo "$name: gpipe-plan FAILED (see $out/$name.plan.log)" >&2; failed=1; }
      t0=$SECONDS
      rm -f "$out/$name.done"
      if [ "$probe" = 1 ]; then
        "$py" perf/wake_probe.py --until-file "$out/$name.done" --json > "$out/$name.wake.json" 2>/dev/null &
        probe_pid=$!
      fi
      if "${launcher[@]}" -n "$k" "$train" "$deck" "${sets[@]}" --set training.epochs=1 \
          --set data.train_limit=$((n * steps)) --set data.test_limit="$((n < 256 ? n : 256))" --set training.progress_every=0 \
          --set trace.every=1 --quiet --trace "$out/$name.h5" --summary "$out/$name.json" > "$out/$name.log" 2>&1; then
        echo "$name: done in $((SECONDS - t0)) s"
      else
        echo "$name: FAILED (see $out/$name.log)" >&2; failed=1
      fi
      if [ "$probe" = 1 ]; then
        touch "$out/$name.done"
        wait "$probe_pid" || true
        rm -f "$out/$name.done"
        hop=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["hop_us"])' "$out/$name.wake.json" 2>/dev/null || true)
        [ -z "$hop" ] || "$plan" "$deck" "${sets[@]}" --ranks "$k" --wait-hop-us "$hop" --json > "$out/$name.probed.json" \
          2> "$out/$name.probed.log" || rm -f "$out/$name.probed.json"
      fi
    done
  done
done
calibrate=${CALIBRATE:-1}
if [ "$calibrate" = 1 ]; then
  for k in $cells; do
    for m in $((2 * k)) $((4 * k)); do
      ref="$out/K${k}_M${m}_1f1b.h5"
      [ -f "$ref" ] || continue
      hop=$("$py" perf/hop_delay.py --mean-us "$ref" 2>/dev/null) || continue
      n=$((rows * m))
      for s in $schedules; do
        v=1
        [ "$s" != interleaved_1f1b ] || v=$chunks
        name="K${k}_M${m}_${s}"
        "$plan" "$deck" --set training.batch_size="$n" --set training.micro_batches="$m" --set pipeline.schedule="$s" \
          --set pipeline.chunks="$v" --set parallel.cells="$k" --set pipeline.wait="$wait" --ranks "$k" \
          --wait-hop-us "$hop" --json > "$out/$name.calibrated.json" 2> "$out/$name.calibrated.log" ||
          rm -f "$out/$name.calibrated.json"
      done
    done
  done
fi
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$out/study.txt"
"$py" perf/schedules_emulated.py "$out" || failed=1
exit "$failed"

#!/usr/bin/env bash
# A batch system's stop signal (Slurm --signal, a wall-clock limit):
#  1. SIGTERM on one of 2 ranks mid-epoch: every rank stops after the same
#     step, exactly one new complete checkpoint is written, exit status 75 with
#     the documented message; restarting from it ends bitwise equal (parameters
#     and optimizer state, h5diff) to an uninterrupted run; a stale .tmp
#     checkpoint in the directory is removed at that restart.
#  2. A real SIGUSR1 from outside (kill) stops a running job the same way,
#     also where oneDNN runs its JIT sgemm (ONEDNN_MAX_CPU_ISA=AVX2).
#  3. A second signal ends the process at once (status 128 + signal).
# Usage: stop_signal.sh PATH/TO/gpipe-train PATH/TO/inputs MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
exe=$1
deck=$2/fashion_mnist_mlp.yaml
mpiexec=$3
shift 3
preflags=("$@")
tmp=$(mktemp -d)
pids=()
cleanup() { for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
passed=0 failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
args=(--set data.train_limit=1024 --set data.test_limit=128 --set training.epochs=3
      --set training.progress_every=0 --set checkpoint.every_epochs=0 --set checkpoint.keep=5)
ckpts() { (cd "$1" && ls 2>/dev/null) | tr '\n' ' '; }

# ---- 1. deterministic: the last of 2 ranks gets SIGTERM once 11 steps are done (8 per epoch)
"$mpiexec" -n 2 "${preflags[@]}" "$exe" "$deck" "${args[@]}" --set checkpoint.every_epochs=3 \
  --set checkpoint.directory="$tmp/ref" >"$tmp/ref.log" 2>&1 || fail "reference run: $(cat "$tmp/ref.log")"
GPIPE_FAULT_SIGNAL_AT_STEP=11 "$mpiexec" -n 2 "${preflags[@]}" "$exe" "$deck" "${args[@]}" \
  --set checkpoint.directory="$tmp/a" --summary "$tmp/a.json" >"$tmp/a.log" 2>&1
status=$?
a_ckpt=$(ls "$tmp"/a/ckpt_000000011_*.h5 2>/dev/null)  # named by the run's identity
run=${a_ckpt##*_}; run=${run%.h5}
msg="gpipe-train: stopped by SIGTERM after step 11: checkpoint $a_ckpt written; continue with --restart latest (exit status 75)"
if [ "$status" -eq 75 ] && grep -qxF "$msg" "$tmp/a.log"; then ok "SIGTERM mid-epoch: exit 75 and the message"
else fail "SIGTERM mid-epoch: status $status, log: $(cat "$tmp/a.log")"; fi
if [ "$(ckpts "$tmp/a")" = "ckpt_000000011_$run.h5 " ]; then ok "exactly one new complete checkpoint"
else fail "expected only ckpt_000000011_$run.h5, found: $(ckpts "$tmp/a")"; fi
if grep -q '"signal": "SIGTERM"' "$tmp/a.json" && grep -q '"step": 11' "$tmp/a.json"; then ok "the summary records the stop"
else fail "summary: $(cat "$tmp/a.json" 2>&1)"; fi

touch "$tmp/a/ckpt_000000099.h5.tmp"  # a stale partial checkpoint of an earlier kill
"$mpiexec" -n 2 "${preflags[@]}" "$exe" "$deck" "${args[@]}" --set checkpoint.every_epochs=3 \
  --set checkpoint.directory="$tmp/a" --restart latest >"$tmp/b.log" 2>&1 || fail "restart: $(cat "$tmp/b.log")"
if grep -q "restarting from $a_ckpt (run $run, step 11, epoch 2, 384 of its samples trained)" "$tmp/b.log"; then ok "restart from the signal's checkpoint"
else fail "restart: $(cat "$tmp/b.log")"; fi
if [ ! -e "$tmp/a/ckpt_000000099.h5.tmp" ] && grep -q "removed the partial checkpoint $tmp/a/ckpt_000000099.h5.tmp" "$tmp/b.log"; then
  ok "stale .tmp checkpoint removed at the next start"
else fail "stale .tmp: $(ckpts "$tmp/a") $(cat "$tmp/b.log")"; fi
if h5diff "$(ls "$tmp"/ref/ckpt_000000024_*.h5)" "$tmp/a/ckpt_000000024_$run.h5" /layers /layers >"$tmp/diff" 2>&1; then
  ok "interrupted + restarted run equals the uninterrupted one bitwise (h5diff /layers)"
else fail "h5diff: $(head -n 20 "$tmp/diff")"; fi

# ---- 2. a real signal from outside, on a single-rank run that would take minutes
wait_for_progress() {  # log pid: until the first progress line (the run is then mid-epoch)
  for _ in $(seq 1 600); do
    grep -Eq "epoch [0-9]+/[0-9]+ +step" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
long=(--set data.train_limit=1024 --set data.test_limit=128 --set training.epochs=100000
      --set training.progress_every=1 --set checkpoint.every_epochs=0)
# $1: a label, $2: the checkpoint folder; the rest: environment (VAR=VALUE) for the run
usr1_from_outside() {
  local label=$1 dir=$2
  shift 2
  env "$@" "$exe" "$deck" "${long[@]}" --set checkpoint.directory="$dir" >"$dir.log" 2>&1 &
  local pid=$!; pids+=("$pid")
  if wait_for_progress "$dir.log" "$pid"; then
    kill -USR1 "$pid"
    wait "$pid"; local status=$?
    local n; n=$(ls "$dir" 2>/dev/null | grep -c '^ckpt_[0-9]*_[0-9a-f]*\.h5$')
    if [ "$status" -eq 75 ] && [ "$n" -eq 1 ] && grep -q "stopped by SIGUSR1 after step" "$dir.log"; then
      ok "SIGUSR1 from outside$label: exit 75, one checkpoint ($(ckpts "$dir"))"
    else fail "SIGUSR1 from outside$label: status $status, checkpoints: $(ckpts "$dir"), log: $(grep -v ' step ' "$dir.log" | tail -n 20)"; fi
  else fail "the long run$label printed no progress: $(cat "$dir.log")"; fi
}
usr1_from_outside "" "$tmp/c"
# The CPU class below AVX-512: oneDNN's JIT sgemm points rsp into the heap
# while it runs (oneDNN issue 4845); a handler run on that thread corrupted
# the heap ("corrupted size vs. prev_size", status 134). The signals are
# taken by a thread that runs no kernel (train/stop_signal.hpp).
for i in 1 2 3; do
  usr1_from_outside " (kernels onednn, ONEDNN_MAX_CPU_ISA=AVX2, run $i)" "$tmp/avx2_$i" GPIPE_KERNELS=onednn ONEDNN_MAX_CPU_ISA=AVX2
done

# ---- 3. a second signal: exit at once. Stopped, the process gets SIGUSR1 and SIGTERM
# pending; on SIGCONT both handlers run before the step can finish.
"$exe" "$deck" "${long[@]}" --set checkpoint.directory="$tmp/d" >"$tmp/d.log" 2>&1 &
pid=$!; pids+=("$pid")
if wait_for_progress "$tmp/d.log" "$pid"; then
  kill -STOP "$pid"; kill -USR1 "$pid"; kill -TERM "$pid"; kill -CONT "$pid"
  wait "$pid"; status=$?
  if { [ "$status" -eq 143 ] || [ "$status" -eq 138 ]; } \
     && grep -qxF "gpipe: second signal, exiting at once without a checkpoint" "$tmp/d.log" \
     && [ -z "$(ls "$tmp/d" 2>/dev/null | grep '\.h5$')" ]; then
    ok "second signal: exit $status at once, no checkpoint"
  else fail "second signal: status $status, checkpoints: $(ckpts "$tmp/d"), log: $(tail -n 3 "$tmp/d.log")"; fi
else fail "the long run printed no progress: $(cat "$tmp/d.log")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

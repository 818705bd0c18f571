#!/usr/bin/env bash
# A crash (SIGKILL) in the middle of a checkpoint write leaves the previous
# checkpoint intact and loadable, and --restart latest ignores the partial file.
# Usage: checkpoint_crash.sh PATH/TO/gpipe-train PATH/TO/inputs
set -u
exe=$1
deck=$2/fashion_mnist_mlp.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--set data.train_limit=1024 --set data.test_limit=128 --set training.epochs=3
      --set training.progress_every=0 --set checkpoint.directory="$tmp/ckpt" --set checkpoint.keep=2)
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

# 1. One epoch, checkpoint after it (8 steps).
"$exe" "$deck" "${args[@]}" --set training.epochs=1 >"$tmp/run1.log" 2>&1 || fail "first run: $(cat "$tmp/run1.log")"
good="$tmp/ckpt/ckpt_000000008.h5"
[ -f "$good" ] || fail "no checkpoint after the first run: $(ls "$tmp/ckpt")"
sum_before=$(md5sum <"$good")

# 2. Restart; the process is killed while writing the next checkpoint.
GPIPE_FAULT_KILL_DURING_CHECKPOINT=1 "$exe" "$deck" "${args[@]}" --restart latest >"$tmp/run2.log" 2>&1
status=$?
[ "$status" -ne 0 ] || fail "the run with the injected crash exited 0"
[ -f "$tmp/ckpt/ckpt_000000016.h5.tmp" ] || fail "no partial file: $(ls "$tmp/ckpt")"
[ ! -f "$tmp/ckpt/ckpt_000000016.h5" ] || fail "a partial checkpoint was renamed into place"
[ "$(md5sum <"$good")" = "$sum_before" ] || fail "the previous checkpoint changed"

# 3. Restart from the latest complete checkpoint: the good one, loadable.
"$exe" "$deck" "${args[@]}" --restart latest >"$tmp/run3.log" 2>&1 || fail "restart after crash: $(cat "$tmp/run3.log")"
grep -q "restarting from $good (step 8, epoch 2)" "$tmp/run3.log" || fail "did not restart from $good: $(cat "$tmp/run3.log")"
grep -q "^epoch 3/3: " "$tmp/run3.log" || fail "training did not finish: $(cat "$tmp/run3.log")"
# keep = 2: the two newest complete checkpoints remain.
[ "$(ls "$tmp/ckpt" | grep -c '\.h5$')" = 2 ] || fail "expected 2 checkpoints kept: $(ls "$tmp/ckpt")"
echo "ok   crash during checkpoint write"
echo "1 passed, 0 failed"

#!/usr/bin/env bash
# A crash (SIGKILL) in the middle of a checkpoint write leaves the previous
# checkpoint intact and loadable, and --restart latest ignores the partial file.
# Usage: checkpoint_crash.sh PATH/TO/gpipe-train PATH/TO/inputs PATH/TO/libgpipe_kill_during_checkpoint.so
# (the crash is injected from outside the library: the LD_PRELOAD shim
# tests/integration/kill_during_checkpoint.c kills the process after the
# first dataset of the partial checkpoint file is written).
set -u
exe=$1
deck=$2/fashion_mnist_mlp.yaml
shim=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--set data.train_limit=1024 --set data.test_limit=128 --set training.epochs=3
      --set training.progress_every=0 --set checkpoint.directory="$tmp/ckpt" --set checkpoint.keep=2)
fail() { echo "FAIL: $*"; echo "1 failed"; exit 1; }

# 1. One epoch, checkpoint after it (8 steps).
"$exe" "$deck" "${args[@]}" --set training.epochs=1 >"$tmp/run1.log" 2>&1 || fail "first run: $(cat "$tmp/run1.log")"
good=$(ls "$tmp"/ckpt/ckpt_000000008_*.h5 2>/dev/null)
[ -f "$good" ] || fail "no checkpoint after the first run: $(ls "$tmp/ckpt")"
run=${good##*_}; run=${run%.h5}  # the run's identity, in every file name it writes
sum_before=$(md5sum <"$good")

# 2. Restart; the process is killed while writing the next checkpoint.
LD_PRELOAD="$shim" "$exe" "$deck" "${args[@]}" --restart latest >"$tmp/run2.log" 2>&1
status=$?
[ "$status" -ne 0 ] || fail "the run with the injected crash exited 0"
[ -f "$tmp/ckpt/ckpt_000000016_$run.h5.tmp" ] || fail "no partial file: $(ls "$tmp/ckpt")"
[ ! -f "$tmp/ckpt/ckpt_000000016_$run.h5" ] || fail "a partial checkpoint was renamed into place"
[ "$(md5sum <"$good")" = "$sum_before" ] || fail "the previous checkpoint changed"

# 3. Restart from the latest complete checkpoint: the good one, loadable.
"$exe" "$deck" "${args[@]}" --restart latest >"$tmp/run3.log" 2>&1 || fail "restart after crash: $(cat "$tmp/run3.log")"
grep -q "restarting from $good (run $run, step 8, epoch 2, 0 of its samples trained)" "$tmp/run3.log" ||
  fail "did not restart from $good: $(cat "$tmp/run3.log")"
grep -q "^epoch 3/3: " "$tmp/run3.log" || fail "training did not finish: $(cat "$tmp/run3.log")"
# keep = 2: the two newest complete checkpoints remain.
[ "$(ls "$tmp/ckpt" | grep -c '\.h5$')" = 2 ] || fail "expected 2 checkpoints kept: $(ls "$tmp/ckpt")"
echo "ok   crash during checkpoint write"

# 4. A new run in the same directory (issue 12 s.3): the older run's
# higher-numbered checkpoints are neither pruned nor overwritten, and
# --restart latest resumes the new run (the newest), not the older one.
older=$(ls "$tmp/ckpt" | grep '\.h5$' | sort)
"$exe" "$deck" "${args[@]}" --set training.epochs=1 >"$tmp/run4.log" 2>&1 || fail "new run: $(cat "$tmp/run4.log")"
new=$(ls "$tmp"/ckpt/ckpt_000000008_*.h5 | grep -v "_$run.h5")
[ -f "$new" ] || fail "the new run wrote no checkpoint of its own: $(ls "$tmp/ckpt")"
for f in $older; do [ -f "$tmp/ckpt/$f" ] || fail "the new run removed the older run's $f"; done
new_run=${new##*_}; new_run=${new_run%.h5}
"$exe" "$deck" "${args[@]}" --restart latest >"$tmp/run5.log" 2>&1 || fail "restart of the new run: $(cat "$tmp/run5.log")"
grep -q "restarting from $new (run $new_run, step 8, epoch 2, 0 of its samples trained)" "$tmp/run5.log" ||
  fail "--restart latest did not resume the newest run: $(cat "$tmp/run5.log")"
for f in $older; do [ -f "$tmp/ckpt/$f" ] || fail "the resumed run removed the older run's $f"; done
[ "$(ls "$tmp/ckpt" | grep -c "_$new_run\.h5$")" = 2 ] || fail "the new run keeps 2: $(ls "$tmp/ckpt")"
echo "ok   runs sharing a checkpoint directory"
echo "2 passed, 0 failed"

#!/usr/bin/env bash
# A run's history across restarts, its metrics stream, the output-path checks
# before the first step, and checkpoint directories as --restart and
# gpipe-infer arguments (2 ranks, Fashion-MNIST slice, 3 epochs of 8 steps):
#  1. a run stopped by a signal mid-epoch 2 and restarted from its checkpoint
#     DIRECTORY (--restart DIR) writes one summary holding all 3 epochs of the
#     run (same run_id; epoch 1 from the first job, exactly), the later epochs
#     bitwise those of an uninterrupted run;
#  2. the metrics stream (--metrics) of both jobs: one file, a partial line of
#     a killed job left alone, start/progress/epoch/stop/end records with the
#     documented keys, progress at every 2nd step (9 records), steps increasing;
#  3. every summary key and history key written is documented in
#     docs/file-formats.md and every documented one is written;
#  4. --summary, --metrics, --trace and checkpoint.directory that cannot be
#     written fail before the first step with the path and the OS's reason;
#  5. gpipe-infer DIR takes the newest checkpoint; errors are printed once.
# Usage: run_history.sh gpipe-train gpipe-infer SOURCE_DIR PYTHON MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
exe=$1 infer=$2 src=$3 python=$4 mpiexec=$5
shift 5
preflags=("$@")
deck=$src/inputs/fashion_mnist_mlp.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
run2() { "$mpiexec" -n 2 "${preflags[@]}" "$@"; }
args=(--set data.train_limit=1024 --set data.test_limit=128 --set training.epochs=3
      --set training.progress_every=2 --set checkpoint.keep=2)

# ---- 1. history across a stop and a restart from the directory
run2 "$exe" "$deck" "${args[@]}" --set checkpoint.directory="$tmp/ref" --summary "$tmp/ref.json" \
  >"$tmp/ref.log" 2>&1 || fail "reference run: $(cat "$tmp/ref.log")"
GPIPE_FAULT_SIGNAL_AT_STEP=11 run2 "$exe" "$deck" "${args[@]}" --set checkpoint.directory="$tmp/a" \
  --summary "$tmp/s.json" --metrics "$tmp/m.jsonl" >"$tmp/a.log" 2>&1
status=$?
[ "$status" -eq 75 ] && ok "first job stopped by the signal (75)" || fail "first job: status $status: $(cat "$tmp/a.log")"
cp "$tmp/s.json" "$tmp/s_first.json"
printf '{"event":"progress","run_id":"cut' >>"$tmp/m.jsonl"  # a job killed mid-line
run2 "$exe" "$deck" "${args[@]}" --set checkpoint.directory="$tmp/a" --restart "$tmp/a" \
  --summary "$tmp/s.json" --metrics "$tmp/m.jsonl" >"$tmp/b.log" 2>&1
status=$?
[ "$status" -eq 0 ] && ok "restart from the directory" || fail "restart: status $status: $(cat "$tmp/b.log")"
grep -q "gpipe-train: restarting from $tmp/a/ckpt_000000011_" "$tmp/b.log" \
  && ok "--restart DIR took the step-11 checkpoint" || fail "restart message: $(cat "$tmp/b.log")"

"$python" - "$tmp" "$src/docs/file-formats.md" <<'EOF' && ok "summary history, metrics stream, documented keys" || fail "see above"
import json, re, sys
tmp, formats = sys.argv[1], sys.argv[2]
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
ref, first, s = (json.load(open(f"{tmp}/{n}.json")) for n in ("ref", "s_first", "s"))
run_id = first["run_id"]
check(re.fullmatch(r"[0-9a-f]{16}", run_id), f"run_id {run_id!r}")
check([h["epoch"] for h in first["history"]] == [1], f"first job's history {first['history']}")
check(s["run_id"] == run_id, f"restarted run_id {s['run_id']} != {run_id}")
check([h["epoch"] for h in s["history"]] == [1, 2, 3], f"history epochs {[h['epoch'] for h in s['history']]}")
check(s["history"][0] == first["history"][0], "epoch 1 differs from the first job's record")
check(s["epochs_this_job"] == 2 and first["epochs_this_job"] == 1, "epochs_this_job")
for e in (1, 2):  # the restarted epochs: bitwise those of the uninterrupted run
    for key in ("train_loss", "test_loss", "test_accuracy", "train_samples"):
        check(s["history"][e][key] == ref["history"][e][key],
              f"epoch {e + 1} {key}: {s['history'][e][key]} != reference {ref['history'][e][key]}")
check(s["history"][0]["test_loss"] == ref["history"][0]["test_loss"], "epoch 1 test_loss vs reference")
check(s["test_loss"] == ref["test_loss"], "final test_loss vs reference")

# the metrics stream
lines = open(f"{tmp}/m.jsonl").read().split("\n")
check(lines[-1] == "", "the stream does not end with a newline")
records, bad = [], []
for line in lines[:-1]:
    try:
        records.append(json.loads(line))
    except ValueError:
        bad.append(line)
check(bad == ['{"event":"progress","run_id":"cut'], f"unparsable lines {bad}")
events = [r["event"] for r in records]
check(events.count("start") == 2 and events.count("stop") == 1 and events.count("end") == 1,
      f"events {events}")
check(events[0] == "start" and events[-1] == "end", f"events {events}")
check(all(r["run_id"] == run_id for r in records), "a record of another run id")
progress = [r for r in records if r["event"] == "progress"]
check([r["step"] for r in progress] == [2, 4, 6, 10, 12, 14, 18, 20, 22],
      f"progress steps {[r['step'] for r in progress]}")
check([r["epoch_step"] for r in progress] == [2, 4, 6] * 3, "epoch_step")
keys = {"event", "run_id", "time", "step", "epoch", "epoch_step", "epoch_steps", "loss",
        "learning_rate", "samples_per_second", "rss_bytes", "peak_rss_bytes"}
for r in progress:
    check(set(r) == keys, f"progress keys {sorted(set(r) ^ keys)}")
    check(r["epoch_steps"] == 8 and r["loss"] > 0 and 0 < r["learning_rate"] < 1, f"progress {r}")
    check(r["rss_bytes"] > 1 << 20 and r["peak_rss_bytes"] >= r["rss_bytes"], f"memory {r}")
epochs = [r for r in records if r["event"] == "epoch"]
check([(r["epoch"], r["step"]) for r in epochs] == [(1, 8), (2, 16), (3, 24)], "epoch records")
for r, h in zip(epochs, s["history"]):
    entry = {k: v for k, v in r.items() if k not in ("event", "run_id", "time", "step")}
    check(entry == h, f"epoch record {entry} != history {h}")
starts = [r for r in records if r["event"] == "start"]
check(starts[0]["restart"] is None and starts[1]["restart"].startswith(f"{tmp}/a/ckpt_000000011_"),
      "start records' restart")
check(starts[1]["epoch"] == 2 and starts[1]["step"] == 11 and starts[0]["cores"] >= 1, "second start")
check(starts[0]["layout"] == [[0, 1]] and starts[0]["ranks"] == 2, "start layout")
stop = next(r for r in records if r["event"] == "stop")
check(stop["step"] == 11 and stop["signal"] == "SIGTERM", f"stop {stop}")

# every key written is documented, and every documented key is written
text = open(formats).read()
table = text[text.index("## Run summary"):text.index("The run record (`run`")]
documented, history_doc = set(), set()
for row in table.split("\n"):
    if not row.startswith("| `"):
        continue
    first_cell = row.split("|")[1]
    names = re.findall(r"`([a-z_0-9]+)`", first_cell)
    documented |= set(names)
    if names == ["history"]:
        history_doc = set(re.findall(r"`([a-z_0-9]+)`", row.split("|")[2]))
written = set(s)
only_regression_or_link = {"test_metrics", "train_metrics", "link",
                           # a language model (model.loss: token_cross_entropy) only
                           "test_perplexity", "test_bits_per_token", "train_perplexity",
                           "train_bits_per_token", "tokens_per_sample",
                           # precision: fp16 only
                           "loss_scale", "loss_scale_overflows"}
check(written <= documented, f"written but not documented: {sorted(written - documented)}")
trace_keys = {"trace", "bubble_fraction_measured", "communication"}
check(documented - written <= only_regression_or_link | trace_keys,
      f"documented but not written: {sorted(documented - written - only_regression_or_link - trace_keys)}")
hist = set(s["history"][0])
regression_history = {"test_rmse", "test_mae", "test_r2", "train_rmse",
                      "test_perplexity", "test_bits_per_token"}  # (language model only)
check(hist <= history_doc, f"history keys not documented: {sorted(hist - history_doc)}")
check(history_doc - hist <= regression_history, f"history keys documented, not written: {sorted(history_doc - hist - regression_history)}")
check(s["machine_load"]["cores"] >= 1, "machine_load.cores")
for e in errors:
    print("  " + e)
sys.exit(1 if errors else 0)
EOF

# ---- 4. output paths checked before the first step (exit 2, the path and the reason)
touch "$tmp/file"
expect_error() {  # NAME MESSAGE ARGS...
  local name=$1 message=$2
  shift 2
  run2 "$exe" "$deck" "${args[@]}" "$@" >"$tmp/e.log" 2>&1
  local status=$?
  if [ "$status" -eq 2 ] && [ "$(grep -cxF "$message" "$tmp/e.log")" -eq 1 ] && ! grep -q "epoch 1/" "$tmp/e.log"; then
    ok "$name"
  else
    fail "$name: status $status, expected once: $message"$'\n'"$(cat "$tmp/e.log")"
  fi
}
expect_error "--summary into a missing directory" \
  "gpipe-train: error: --summary $tmp/missing/s.json: cannot create files in $tmp/missing: No such file or directory (rank 0)" \
  --summary "$tmp/missing/s.json"
expect_error "--metrics under a file" \
  "gpipe-train: error: --metrics $tmp/file/m.jsonl: cannot create files in $tmp/file: Not a directory (rank 0)" \
  --metrics "$tmp/file/m.jsonl"
expect_error "--trace into a missing directory" \
  "gpipe-train: error: trace.file (--trace) $tmp/missing/t.h5: cannot create files in $tmp/missing: No such file or directory (rank 0)" \
  --trace "$tmp/missing/t.h5"
expect_error "checkpoint.directory is a file" \
  "gpipe-train: error: checkpoint.directory $tmp/file: exists and is not a directory (rank 0)" \
  --set checkpoint.directory="$tmp/file"
expect_error "checkpoint.directory under a file" \
  "gpipe-train: error: checkpoint.directory $tmp/file/ckpt: cannot create the directory: Not a directory (rank 0)" \
  --set checkpoint.directory="$tmp/file/ckpt"
[ ! -e "$tmp/missing" ] && ok "nothing created for the failed runs" || fail "$tmp/missing was created"

# ---- 5. gpipe-infer with a directory (its newest checkpoint); errors once
"$python" -c "
import h5py, numpy as np
with h5py.File('$tmp/x.h5', 'w') as f: f['inputs'] = np.random.default_rng(1).random((20, 784), dtype=np.float32) * 255
"
newest=$(ls "$tmp"/a/ckpt_000000024_*.h5)
run2 "$infer" "$tmp/a" --input "$tmp/x.h5" --output "$tmp/p.h5" >"$tmp/i.log" 2>&1
status=$?
if [ "$status" -eq 0 ] && [ "$(grep -cxF "gpipe-infer: $tmp/a: its newest checkpoint is $newest" "$tmp/i.log")" -eq 1 ]; then
  ok "gpipe-infer DIR: the newest checkpoint, named once"
else fail "gpipe-infer DIR: status $status: $(cat "$tmp/i.log")"; fi
mkdir "$tmp/empty"
run2 "$infer" "$tmp/empty" --input "$tmp/x.h5" --output "$tmp/p2.h5" >"$tmp/i.log" 2>&1
status=$?
msg="gpipe-infer: error: $tmp/empty: no complete checkpoint (ckpt_*.h5) in this directory"
[ "$status" -eq 2 ] && [ "$(grep -cxF "$msg" "$tmp/i.log")" -eq 1 ] && [ "$(grep -c '^gpipe-infer' "$tmp/i.log")" -eq 1 ] \
  && ok "gpipe-infer on an empty directory: one error line" || fail "empty directory: status $status: $(cat "$tmp/i.log")"
run2 "$infer" "$tmp/a/ckpt_000000001_0000000000000000.h5" --input "$tmp/x.h5" --output "$tmp/p3.h5" >"$tmp/i.log" 2>&1
status=$?
[ "$status" -eq 2 ] && [ "$(grep -c "^gpipe-infer: error: " "$tmp/i.log")" -eq 1 ] \
  && ok "gpipe-infer on a missing file: one error line" || fail "missing file: status $status: $(cat "$tmp/i.log")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

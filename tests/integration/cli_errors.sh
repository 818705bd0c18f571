#!/usr/bin/env bash
# Bad input to gpipe-train: each case must exit non-zero with the exact error
# on stderr and leave no summary file behind.
# Usage: cli_errors.sh PATH/TO/gpipe-train PATH/TO/inputs
set -u
exe=$1
deck=$2/fashion_mnist_mlp.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 passed=0

# expect NAME STATUS EXPECTED_STDERR_LINE ARGS...
expect() {
  local name=$1 status=$2 message=$3
  shift 3
  rm -f "$tmp/summary.json"
  "$exe" "$@" --summary "$tmp/summary.json" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$status" ]; then
    echo "FAIL $name: exit status $rc, expected $status"; cat "$tmp/err"; failures=$((failures + 1)); return
  fi
  if ! grep -qxF -- "$message" "$tmp/err"; then
    echo "FAIL $name: stderr lacks the line: $message"; echo "--- stderr:"; cat "$tmp/err"
    failures=$((failures + 1)); return
  fi
  if [ -e "$tmp/summary.json" ] || [ -e "$tmp/summary.json.tmp" ]; then
    echo "FAIL $name: a summary file was left behind"; failures=$((failures + 1)); return
  fi
  echo "ok   $name"; passed=$((passed + 1))
}

printf 'model: {input: 4\n' >"$tmp/syntax.yaml"
sed 's/input: 784/input: 100/' "$deck" >"$tmp/input100.yaml"
printf '\x1f\x00\x08\x01\x00\x00\x00\x01\x05' >"$tmp/magic.idx"
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c\x01\x02' >"$tmp/short.idx"

expect unknown_set_key 2 \
  "gpipe-train: error: unknown --set key 'training.epoch' (known keys: seed, precision, kernels, checkpoint.directory, checkpoint.every_steps, checkpoint.every_epochs, checkpoint.keep, data.format, data.train_images, data.train_labels, data.test_images, data.test_labels, data.train_file, data.test_file, data.inputs_dataset, data.labels_dataset, data.targets_dataset, data.normalize, data.normalize_targets, data.train_limit, data.test_limit, data.tokens_dataset, data.sequence_length, model.loss, model.huber_delta, optimizer.type, optimizer.lr, optimizer.momentum, optimizer.beta1, optimizer.beta2, optimizer.eps, optimizer.weight_decay, optimizer.schedule, optimizer.warmup_steps, optimizer.clip_norm, parallel.cells, parallel.placement, parallel.deterministic_reduction, parallel.bucket_kib, pipeline.balance, pipeline.remat, pipeline.schedule, pipeline.schedule_file, pipeline.chunks, pipeline.w_group, pipeline.memory_budget, pipeline.activation_storage, pipeline.wait, pipeline.tf32, pipeline.link.latency_us, pipeline.link.bandwidth_gbps, trace.file, trace.every, training.epochs, training.batch_size, training.micro_batches, training.shuffle, training.progress_every, training.nonfinite, training.loss_scale, training.loss_scale_growth_interval, training.loss_scale_growth, training.loss_scale_backoff)" \
  "$deck" --set training.epoch=3
expect yaml_syntax 2 \
  "gpipe-train: error: $tmp/syntax.yaml:2:1: YAML syntax error: end of map flow not found" \
  "$tmp/syntax.yaml"
expect missing_deck 2 \
  "gpipe-train: error: $tmp/none.yaml: cannot open input deck (missing or unreadable)" \
  "$tmp/none.yaml"
expect negative_batch 2 \
  "gpipe-train: error: $deck (--set): training.batch_size: expected an integer in [1, 2^31 - 1], got -1" \
  "$deck" --set training.batch_size=-1
expect missing_dataset 2 \
  "gpipe-train: error: $tmp/none.gz: cannot open IDX file (missing or unreadable)" \
  "$deck" --set data.train_images="$tmp/none.gz"
expect wrong_magic 2 \
  "gpipe-train: error: $tmp/magic.idx: not an IDX file: magic number starts with 0x1f00, expected 0x0000" \
  "$deck" --set data.train_images="$tmp/magic.idx"
expect truncated_dataset 2 \
  "gpipe-train: error: $tmp/short.idx: truncated IDX file: header dimensions 2 x 28 x 28 promise 1568 values, found 2" \
  "$deck" --set data.train_images="$tmp/short.idx"
expect input_size_mismatch 2 \
  "gpipe-train: error: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz: samples have 784 features but model.input is 100" \
  "$tmp/input100.yaml"
expect cells_not_dividing_ranks 2 \
  "gpipe-train: error: parallel.cells: 2 cells per pipeline do not divide the 1 MPI ranks (ranks = replicas x cells)" \
  "$deck" --set parallel.cells=2

# Deck domains (issue 12): duplicates, ranges, finiteness, empty values.
awk '{print} /^  lr: /{print "  lr: 5.0"}' "$deck" >"$tmp/dup.yaml"
first_lr=$(grep -n '^  lr: 1' "$tmp/dup.yaml" | cut -d: -f1)
expect duplicate_key 2 \
  "gpipe-train: error: $tmp/dup.yaml:$((first_lr + 1)):3: optimizer.lr: duplicate key (first given at $tmp/dup.yaml:$first_lr:3; a key may appear once)" \
  "$tmp/dup.yaml"
expect negative_train_limit 2 \
  "gpipe-train: error: $deck (--set): data.train_limit: expected an integer >= 0, got -5" \
  "$deck" --set data.train_limit=-5
expect infinite_lr 2 \
  "gpipe-train: error: $deck (--set): optimizer.lr: expected a finite number > 0, got .inf" \
  "$deck" --set optimizer.lr=.inf
expect unknown_precision 2 \
  "gpipe-train: error: $deck (--set): precision: expected float, double, bf16 or fp16, got 'half'" \
  "$deck" --set precision=half
expect loss_scale_backoff_above_one 2 \
  "gpipe-train: error: $deck (--set): training.loss_scale_backoff: 2 does not back off (expected a number in (0, 1))" \
  "$deck" --set precision=fp16 --set training.loss_scale_backoff=2
# fp16's loss-scaling keys with another precision (read by nothing before: accepted silently).
expect loss_scale_without_fp16 2 \
  "gpipe-train: error: $deck (--set): training.loss_scale: dynamic loss scaling is for precision fp16 only (precision is bf16); remove the key or set precision: fp16" \
  "$deck" --set precision=bf16 --set training.loss_scale=1024
expect negative_progress 2 \
  "gpipe-train: error: $deck (--set): training.progress_every: expected an integer >= 0, got -3" \
  "$deck" --set training.progress_every=-3
expect empty_value 2 \
  "gpipe-train: error: $deck (--set): training.epochs: expected an integer in [1, 2^31 - 1], got an empty value" \
  "$deck" --set training.epochs=

# Hostile IDX header: 0xFFFFFFFF images in a 116-byte file, refused before allocating.
{ printf '\x00\x00\x08\x03\xff\xff\xff\xff\x00\x00\x00\x0a\x00\x00\x00\x0a'; head -c 100 /dev/zero; } >"$tmp/hostile.idx"
expect hostile_idx_header 2 \
  "gpipe-train: error: $tmp/hostile.idx: truncated IDX file: header dimensions 4294967295 x 10 x 10 promise 429496729500 values, found 100" \
  "$deck" --set data.train_images="$tmp/hostile.idx"

# On 2 ranks: a set-up error is printed once (not once per rank), and a
# non-finite loss aborts every rank cleanly (exit 1), with one message and no checkpoint.
if command -v mpiexec >/dev/null && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import h5py" 2>/dev/null; then
  mpi=(mpiexec -n 2 --oversubscribe)
  "${mpi[@]}" "$exe" "$deck" --set data.train_images="$tmp/none.gz" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq 2 ] && [ "$(grep -c 'gpipe-train: error:' "$tmp/err")" = 1 ]; then
    echo "ok   setup_error_printed_once"; passed=$((passed + 1))
  else
    echo "FAIL setup_error_printed_once: exit $rc"; cat "$tmp/err"; failures=$((failures + 1))
  fi
  /usr/bin/python3 - "$tmp" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(1)
for name in ("train", "test"):
    x = rng.standard_normal((64, 16)).astype(np.float32)
    if name == "train":
        x[0, :] = 3e38  # finite floats whose first-layer sums overflow
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "w") as f:
        f["inputs"] = x
        f["labels"] = rng.integers(0, 10, 64)
PY
  cat >"$tmp/spike.yaml" <<EOF2
model:
  input: 16
  layers: [{type: dense, units: 512}, {type: relu}, {type: dense, units: 256}, {type: relu}, {type: dense, units: 10}]
data: {format: hdf5, train_file: $tmp/train.h5, test_file: $tmp/test.h5, normalize: none}
training: {epochs: 1, batch_size: 16, micro_batches: 4, shuffle: false}
optimizer: {type: adamw, lr: 1.0e-3}
checkpoint: {directory: $tmp/spike_ckpt, every_steps: 1}
EOF2
  # A deck that differs on rank 1 (an MPMD launch with another --set; a node-local copy): before, the
  # two ranks trained with different learning rates without a word. Now every rank stops (exit 2) with
  # one message naming rank 1 and the first difference.
  small=(--set data.train_limit=128 --set data.test_limit=64 --set training.epochs=1)
  rm -f "$tmp/summary.json"
  mpiexec --oversubscribe -n 1 "$exe" "$deck" "${small[@]}" --summary "$tmp/summary.json" : \
          -n 1 "$exe" "$deck" "${small[@]}" --set optimizer.lr=0.5 --summary "$tmp/summary.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  message="gpipe-train: error: $deck: rank 1 read another deck than rank 0 ($deck): first difference in section optimizer: rank 1 has '  lr: 0.5', rank 0 has '  lr: 1.0e-3' (the deck as parsed, after --set); every rank must read the same deck with the same --set options"
  if [ "$rc" -eq 2 ] && [ "$(grep -c 'gpipe-train: error:' "$tmp/err")" = 1 ] && grep -qxF -- "$message" "$tmp/err" &&
     [ ! -e "$tmp/summary.json" ]; then
    echo "ok   deck_differs_on_rank_1"; passed=$((passed + 1))
  else
    echo "FAIL deck_differs_on_rank_1: exit $rc"; cat "$tmp/err"; failures=$((failures + 1))
  fi
  rm -f "$tmp/summary.json"
  "${mpi[@]}" "$exe" "$tmp/spike.yaml" --summary "$tmp/summary.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  message="gpipe-train: error: step 1: non-finite values (training.nonfinite: abort): the loss is not finite; the first layer with a non-finite gradient is layer 0 (dense) in cell 0; the parameters are those before this step"
  if [ "$rc" -eq 1 ] && [ "$(grep -c 'gpipe-train: error:' "$tmp/err")" = 1 ] && grep -qxF -- "$message" "$tmp/err" &&
     [ -z "$(ls "$tmp/spike_ckpt" 2>/dev/null)" ] && [ ! -e "$tmp/summary.json" ]; then
    echo "ok   nonfinite_abort_2_ranks"; passed=$((passed + 1))
  else
    echo "FAIL nonfinite_abort_2_ranks: exit $rc"; cat "$tmp/err"; ls "$tmp/spike_ckpt" 2>/dev/null
    failures=$((failures + 1))
  fi
fi

# --help and --version succeed and teach.
if "$exe" --help | grep -q "micro-batches" && "$exe" --help | grep -q "GPIPE_KERNELS=auto|portable|onednn" &&
   "$exe" --help | grep -q "precision=float|double|bf16|fp16" && "$exe" --version | grep -q "^Kokkos "; then
  echo "ok   help_and_version"; passed=$((passed + 1))
else
  echo "FAIL help_and_version"; failures=$((failures + 1))
fi

# An invalid GPIPE_KERNELS: the run refuses it (exit 2), and so do --check and --version (which still
# prints the build, its "kernels selected" line showing the error); before, both exited 0.
kernels_error="gpipe-train: error: environment variable GPIPE_KERNELS: unknown kernels 'fast' (expected auto, portable"
for what in version check run; do
  case $what in
    version) args=(--version) ;;
    check) args=("$deck" --check) ;;
    run) args=("$deck" --set data.train_limit=128 --set data.test_limit=64 --set training.epochs=1) ;;
  esac
  GPIPE_KERNELS=fast "$exe" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq 2 ] && [ "$(grep -c 'gpipe-train: error:' "$tmp/err")" = 1 ] && grep -qF -- "$kernels_error" "$tmp/err" &&
     { [ "$what" != version ] || grep -q '^gpipe-kokkos ' "$tmp/out"; }; then
    echo "ok   bad_gpipe_kernels_$what"; passed=$((passed + 1))
  else
    echo "FAIL bad_gpipe_kernels_$what: exit $rc"; cat "$tmp/out" "$tmp/err"; failures=$((failures + 1))
  fi
done

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]

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
  "gpipe-train: error: unknown --set key 'training.epoch' (known keys: seed, precision, checkpoint.directory, checkpoint.every_steps, checkpoint.every_epochs, checkpoint.keep, data.format, data.train_images, data.train_labels, data.test_images, data.test_labels, data.train_file, data.test_file, data.inputs_dataset, data.labels_dataset, data.targets_dataset, data.normalize, data.normalize_targets, data.train_limit, data.test_limit, model.loss, model.huber_delta, optimizer.type, optimizer.lr, optimizer.momentum, optimizer.beta1, optimizer.beta2, optimizer.eps, optimizer.weight_decay, optimizer.schedule, parallel.cells, parallel.placement, parallel.deterministic_reduction, parallel.bucket_kib, pipeline.balance, pipeline.remat, pipeline.schedule, trace.file, trace.every, training.epochs, training.batch_size, training.micro_batches, training.shuffle, training.progress_every)" \
  "$deck" --set training.epoch=3
expect yaml_syntax 2 \
  "gpipe-train: error: $tmp/syntax.yaml:2:1: YAML syntax error: end of map flow not found" \
  "$tmp/syntax.yaml"
expect missing_deck 2 \
  "gpipe-train: error: $tmp/none.yaml: cannot open input deck (missing or unreadable)" \
  "$tmp/none.yaml"
expect negative_batch 2 \
  "gpipe-train: error: $deck (--set): training.batch_size: expected a positive integer, got -1" \
  "$deck" --set training.batch_size=-1
expect missing_dataset 2 \
  "gpipe-train: error: $tmp/none.gz: cannot open IDX file (missing or unreadable)" \
  "$deck" --set data.train_images="$tmp/none.gz"
expect wrong_magic 2 \
  "gpipe-train: error: $tmp/magic.idx: not an IDX file: magic number starts with 0x1f00, expected 0x0000" \
  "$deck" --set data.train_images="$tmp/magic.idx"
expect truncated_dataset 2 \
  "gpipe-train: error: $tmp/short.idx: truncated IDX file: header promises 1568 values, found 2" \
  "$deck" --set data.train_images="$tmp/short.idx"
expect input_size_mismatch 2 \
  "gpipe-train: error: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz: samples have 784 features but model.input is 100" \
  "$tmp/input100.yaml"
expect cells_not_dividing_ranks 2 \
  "gpipe-train: error: parallel.cells: 2 cells per pipeline do not divide the 1 MPI ranks (ranks = replicas x cells)" \
  "$deck" --set parallel.cells=2

# --help and --version succeed and teach.
if "$exe" --help | grep -q "micro-batches" && "$exe" --version | grep -q "^Kokkos "; then
  echo "ok   help_and_version"; passed=$((passed + 1))
else
  echo "FAIL help_and_version"; failures=$((failures + 1))
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]

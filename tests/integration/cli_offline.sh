#!/usr/bin/env bash
# What the tools do without MPI or Kokkos (a login node of a GPU cluster):
# --help (gpipe's options, then where the deck keys are, then Kokkos'
# options), --version, --list-keys and --check (the partition table a real
# 2-rank run prints, exit 0; a bad deck exits 2 with the message). Neither
# starts MPI (an MPI_Init here would fail: OMPI_MCA_pml names no component)
# nor Kokkos (an invalid --kokkos-threads is never read). Then the opposite:
# a Kokkos that fails to initialize is "gpipe-train: error: ..." and status 1.
# Usage: cli_offline.sh gpipe-train gpipe-infer INPUTS VERSION MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
train=$1 infer=$2 inputs=$3 version=$4 mpiexec=$5
shift 5
preflags=("$@")
deck=$inputs/fashion_mnist_mlp.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 passed=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
ok() { echo "ok   $1"; passed=$((passed + 1)); }
# offline NAME STATUS ARGS...: runs a tool where MPI cannot start; stdout/stderr in $tmp/out, $tmp/err.
offline() {
  local name=$1 status=$2
  shift 2
  OMPI_MCA_pml=no_such_component "$@" --kokkos-threads=not_a_number >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$status" ]; then
    fail "$name: exit status $rc, expected $status"; cat "$tmp/out" "$tmp/err"; return 1
  fi
  return 0
}
line_of() { grep -n -m1 -F -- "$1" "$2" | cut -d: -f1; }

# --help: gpipe's options, then the deck keys' documentation, then Kokkos' options.
if offline help 0 "$train" --help; then
  a=$(line_of "--set KEY=VALUE" "$tmp/out"); b=$(line_of "--check" "$tmp/out")
  c=$(line_of "Deck keys: docs/input-deck.md" "$tmp/out"); d=$(line_of "Kokkos runtime options" "$tmp/out")
  e=$(line_of "--kokkos-help" "$tmp/out")
  if [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && [ -n "$d" ] && [ -n "$e" ] &&
     [ "$a" -lt "$c" ] && [ "$b" -lt "$c" ] && [ "$c" -lt "$d" ] && [ "$d" -lt "$e" ] &&
     [ ! -s "$tmp/err" ]; then ok help
  else fail "help: order --set $a, --check $b < deck keys $c < Kokkos $d < --kokkos-help $e"; cat "$tmp/out" "$tmp/err"; fi
fi
if offline infer_help 0 "$infer" --help; then
  a=$(line_of "--input" "$tmp/out"); d=$(line_of "Kokkos runtime options" "$tmp/out")
  if [ -n "$a" ] && [ -n "$d" ] && [ "$a" -lt "$d" ]; then ok infer_help; else fail "infer_help"; cat "$tmp/out"; fi
fi

# --version: gpipe, Kokkos, HDF5 and MPI versions, the kernel seam's
# implementations and each primitive's choice (GPIPE_KERNELS=portable forces the reference).
for tool in "$train" "$infer"; do
  name=version_$(basename "$tool")
  if offline "$name" 0 "$tool" --version; then
    if [ "$(head -1 "$tmp/out")" = "gpipe-kokkos $version" ] && grep -q '^Kokkos [0-9.]*, execution space ' "$tmp/out" &&
       grep -q '^HDF5 [0-9]' "$tmp/out" && grep -q '^MPI: ' "$tmp/out" && grep -q '^kernels: portable (' "$tmp/out" &&
       grep -q '^kernels selected auto: gemm float ' "$tmp/out" && [ "$(wc -l <"$tmp/out")" -eq 6 ]; then ok "$name"
    else fail "$name"; cat "$tmp/out"; fi
  fi
done
if GPIPE_KERNELS=portable "$train" --version >"$tmp/out" 2>&1 &&
   grep -q '^kernels selected portable: gemm float portable, gemm double portable, ' "$tmp/out" &&
   ! grep -q 'onednn$\|onednn,' <(grep '^kernels selected' "$tmp/out"); then ok version_portable
else fail version_portable; cat "$tmp/out"; fi

# --list-keys: every settable key with its domain; the layer types with theirs.
if offline list_keys 0 "$train" --list-keys; then
  if grep -qE '^  optimizer\.lr +a finite number > 0$' "$tmp/out" && grep -qE '^  dense +units' "$tmp/out" &&
     grep -qE '^  training\.nonfinite ' "$tmp/out"; then ok list_keys; else fail list_keys; cat "$tmp/out"; fi
fi

# --check: the quickstart deck on 2 ranks.
cat >"$tmp/expected" <<EXPECTED
gpipe-train: 2 ranks (cells), 7 layers, precision float, mini-batch 128 in 8 micro-batches, schedule fill_drain, re-materialization never
  input shape [784]
  cell 0: layers 0-0 (1 layers), cost 2.571e+07 (flops), activations 0.88 MiB, memory 7.4 MiB (7719040 bytes)
    layer  0 dense             output [512]               401920 parameters
  cell 1: layers 1-6 (6 layers), cost 1.291e+07 (flops), activations 1.51 MiB, memory 3.7 MiB (3858600 bytes)
    layer  1 relu              output [512]                    0 parameters
    layer  2 dropout           output [512]                    0 parameters
    layer  3 dense             output [256]               131328 parameters
    layer  4 relu              output [256]                    0 parameters
    layer  5 dropout           output [256]                    0 parameters
    layer  6 dense             output [10]                  2570 parameters
  imbalance (max/mean cell cost) 1.331; bubble of fill_drain = 0.111
EXPECTED
if offline check_2_ranks 0 "$train" "$deck" --check --ranks 2; then
  if head -n -1 "$tmp/out" | diff "$tmp/expected" - >"$tmp/diff" &&
     [ "$(tail -1 "$tmp/out")" = "gpipe-train: $deck: deck valid for 2 ranks (data files readable, not loaded; neither MPI nor Kokkos started)" ]; then
    ok check_2_ranks
  else fail check_2_ranks; cat "$tmp/diff"; tail -1 "$tmp/out"; fi
fi
# The same table as a real 2-rank run prints (the pure shape pass matches the pipeline).
"$mpiexec" -n 2 "${preflags[@]}" "$train" "$deck" --set training.epochs=1 --set data.train_limit=256 \
  --set data.test_limit=128 --set training.progress_every=0 >"$tmp/run" 2>"$tmp/run_err"
if [ $? -eq 0 ] && head -n "$(wc -l <"$tmp/expected")" "$tmp/run" | diff "$tmp/expected" - >"$tmp/diff"; then
  ok check_equals_run
else fail check_equals_run; cat "$tmp/diff" "$tmp/run_err"; fi

# --check with a D x K layout: 4 ranks as 2 replicas x 2 cells.
if offline check_grid 0 "$train" "$deck" --check --ranks 4 --set parallel.cells=2; then
  if grep -qxF "gpipe-train: 4 ranks = 2 replicas (D) x 2 cells (K), 7 layers, precision float, mini-batch 128 in 2 shards of 8 micro-batches, schedule fill_drain, re-materialization never" "$tmp/out" &&
     grep -qxF "  grid: 2 replicas x 2 cells, placement replica: pipelines [0, 2] [1, 3]; gradient reduction MPI_Iallreduce in 256 KiB buckets" "$tmp/out"
  then ok check_grid; else fail check_grid; cat "$tmp/out"; fi
fi

# --check on bad decks: exit 2 and the message a run would print.
expect_error() {
  local name=$1 message=$2
  shift 2
  if offline "$name" 2 "$train" "$@"; then
    if grep -qxF -- "$message" "$tmp/err" && [ ! -s "$tmp/out" ]; then ok "$name"
    else fail "$name: stderr lacks the line: $message"; cat "$tmp/out" "$tmp/err"; fi
  fi
}
expect_error check_bad_value \
  "gpipe-train: error: $deck (--set): training.batch_size: expected an integer in [1, 2^31 - 1], got -1" \
  "$deck" --check --set training.batch_size=-1
expect_error check_too_many_ranks \
  "gpipe-train: error: pipeline: 8 cells (MPI ranks) but the model has only 7 layers; every cell needs at least one layer (run with at most 7 ranks)" \
  "$deck" --check --ranks 8
expect_error check_missing_data \
  "gpipe-train: error: $tmp/none.gz: cannot open data.train_images (missing or unreadable)" \
  "$deck" --check --set data.train_images="$tmp/none.gz"
expect_error check_missing_deck \
  "gpipe-train: error: $tmp/none.yaml: cannot open input deck (missing or unreadable)" \
  "$tmp/none.yaml" --check

# A Kokkos that cannot start: a clear error and status 1 (no abort, no
# signal). Kokkos 3 throws on a malformed --kokkos-threads; Kokkos 4 ignores
# that (renamed) option and reports a malformed --kokkos-num-threads with
# Kokkos::abort, after printing its message and its own backtrace, which
# gpipe turns into the error line and status 1 (core/runtime.hpp).
if "$train" --version | grep -q 'Kokkos 3\.'; then
  "$train" "$deck" --kokkos-threads=not_a_number >"$tmp/out" 2>"$tmp/err"
  rc=$?
  unwanted='[Tt]erminate|[Aa]bort|[Bb]acktrace|[Ss]ignal'
else
  "$train" "$deck" --kokkos-num-threads=not_a_number >"$tmp/out" 2>"$tmp/err"
  rc=$?
  unwanted='terminate called|Aborted|core dumped|[Ss]ignal'
fi
if [ $rc -eq 1 ] && grep -q '^gpipe-train: error: Kokkos initialization failed on rank 0: ' "$tmp/err" &&
   ! grep -qE "$unwanted" "$tmp/err"; then ok kokkos_init_failure
else fail "kokkos_init_failure: status $rc"; cat "$tmp/err"; fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]

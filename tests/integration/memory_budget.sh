#!/usr/bin/env bash
# pipeline.memory_budget from the command line: --check shows each cell's
# bytes against the budget and refuses (exit 2) a layout over it with the
# cell's exact bytes (gpipe-plan's memory_bytes); a run over it stops on
# every rank with the same message before training; a run within it trains
# and its summary's memory gives the model's bytes per rank and a measured
# peak that exceeds them only by the backend's scratch (< 64 KiB); a bad
# byte size is an error naming the key.
# Usage: memory_budget.sh SOURCE_DIR gpipe-train gpipe-plan PYTHON3 MPIEXEC [MPIEXEC_FLAGS...]
set -u
src=$1 train=$2 plan=$3 python=$4 mpiexec=$5
shift 5
flags=("$@")
deck="$src/inputs/fashion_mnist_mlp.yaml"
small=(--set data.train_limit=64 --set data.test_limit=64 --set training.epochs=1 --set training.batch_size=32
       --set checkpoint.every_epochs=0)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 passed=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
ok() { echo "ok   $1"; passed=$((passed + 1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$tmp" || exit 1

"$plan" "$deck" --ranks 2 "${small[@]}" --json >"$tmp/p.json" || fail "gpipe-plan --json"
cell0=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['cells'][0]['memory_bytes'])" "$tmp/p.json")

if "$train" "$deck" --check --ranks 2 "${small[@]}" --set pipeline.memory_budget=512MiB >"$tmp/c.out" 2>&1 &&
   grep -q "cell 0: .*memory .* ($cell0 bytes) of the budget 512.0 MiB" "$tmp/c.out"; then ok "--check within the budget"
else fail "--check within the budget"; cat "$tmp/c.out"; fi

"$train" "$deck" --check --ranks 2 "${small[@]}" --set pipeline.memory_budget=1MiB >"$tmp/o.out" 2>"$tmp/o.err"
status=$?
expected="gpipe-train: error: pipeline.memory_budget: cell 0 (rank 0) needs "
if [ $status -eq 2 ] && grep -q "^${expected}.* ($cell0 bytes), more than the budget of 1.0 MiB (1048576 bytes) per rank: parameters" "$tmp/o.err" &&
   grep -q "OVER" "$tmp/o.out"; then ok "--check over the budget: exit 2, the cell's bytes"
else fail "--check over the budget (status $status)"; cat "$tmp/o.out" "$tmp/o.err"; fi

timeout 120 "$mpiexec" "${flags[@]}" -n 2 "$train" "$deck" "${small[@]}" --set pipeline.memory_budget=1MiB \
  >"$tmp/r.out" 2>"$tmp/r.err"
status=$?
if [ $status -ne 0 ] && [ $status -ne 124 ] && grep -q "^${expected}.* ($cell0 bytes)" "$tmp/r.err" &&
   ! grep -q "epoch 1/1" "$tmp/r.out"; then ok "a run over the budget stops before training"
else fail "a run over the budget (status $status)"; cat "$tmp/r.out" "$tmp/r.err"; fi

if timeout 300 "$mpiexec" "${flags[@]}" -n 2 "$train" "$deck" "${small[@]}" --set pipeline.memory_budget=512MiB \
     --summary "$tmp/s.json" >"$tmp/t.out" 2>&1 &&
   "$python" - "$tmp/s.json" "$tmp/p.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
p = json.load(open(sys.argv[2]))
assert m["budget_bytes"] == 512 * 2**20, m["budget_bytes"]
assert m["predicted_bytes_per_rank"] == [c["memory_bytes"] for c in p["cells"]], (m, p["cells"])
for q, peak in zip(m["predicted_bytes_per_rank"], m["peak_device_bytes_per_rank"]):
    assert q <= peak < q + 65536, (q, peak)
assert all(r > 0 for r in m["peak_rss_bytes_per_rank"])
assert [c["total"] for c in m["predicted_per_cell"]] == m["predicted_bytes_per_rank"]
PY
then ok "a run within the budget: summary memory"
else fail "a run within the budget"; cat "$tmp/t.out"; fi

"$train" "$deck" --check --ranks 2 --set pipeline.memory_budget=12XB >"$tmp/b.out" 2>"$tmp/b.err"
status=$?
if [ $status -eq 2 ] && grep -q "pipeline.memory_budget: expected a byte size such as 512MiB, 2GiB or 800MB (units B, KiB, MiB, GiB, TiB, kB, MB, GB, TB), got '12XB' (unknown unit 'XB')" "$tmp/b.err"
then ok "a bad byte size"; else fail "a bad byte size (status $status)"; cat "$tmp/b.err"; fi

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]

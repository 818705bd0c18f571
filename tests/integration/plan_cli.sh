#!/usr/bin/env bash
# gpipe-plan from the command line: the --json object's keys and values
# (configuration echoed, one entry per cell, comm_bytes the sum of its parts),
# the table, --sweep --json marking a best row, and a bad option or deck as
# "gpipe-plan: error: ..." with exit status 2. No MPI, no Kokkos.
# Usage: plan_cli.sh gpipe-plan INPUTS PYTHON3
set -u
plan=$1 inputs=$2 python=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 passed=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
ok() { echo "ok   $1"; passed=$((passed + 1)); }

# --json: one object with the contract's keys (docs/performance-model.md).
if "$plan" "$inputs/deep_mlp.yaml" --ranks 8 --set parallel.cells=4 --link hdr200 --json >"$tmp/p.json" 2>"$tmp/err" &&
   "$python" - "$tmp/p.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for key in ["step_time_s", "samples_per_s", "bubble_fraction", "cells", "comm_bytes", "replicas",
            "cells_count", "micro_batches", "schedule", "ranks", "pipeline_bytes", "allreduce_bytes"]:
    assert key in p, key
assert p["replicas"] == 2 and p["cells_count"] == 4 and p["micro_batches"] == 8, p
assert p["schedule"] == "fill_drain" and p["network"] == "hdr200", p
assert len(p["cells"]) == 4
for c in p["cells"]:
    for key in ["activation_bytes", "parameter_bytes", "busy_s", "memory_bytes", "peak_micro_batches"]:
        assert key in c, key
assert p["comm_bytes"] == p["pipeline_bytes"] + p["allreduce_bytes"]
assert abs(p["samples_per_s"] * p["step_time_s"] - 256) < 1e-6
assert 0 < p["bubble_fraction"] < 1
PY
then ok json; else fail json; cat "$tmp/err"; fi

# The deck's emulated link (pipeline.link) is the default network; options override it.
if "$plan" "$inputs/deep_mlp.yaml" --ranks 2 --set pipeline.link.latency_us=100 \
     --set pipeline.link.bandwidth_gbps=1 --json >"$tmp/l.json" 2>"$tmp/err" &&
   "$plan" "$inputs/deep_mlp.yaml" --ranks 2 --latency-us 100 --bandwidth-GBps 0.125 --json >"$tmp/c.json" 2>>"$tmp/err" &&
   "$python" - "$tmp/l.json" "$tmp/c.json" <<'PY'
import json, sys
l, c = (json.load(open(p)) for p in sys.argv[1:3])
assert l["network"] == "deck" and c["network"] == "custom", (l["network"], c["network"])
assert l["step_time_s"] == c["step_time_s"], (l["step_time_s"], c["step_time_s"])
PY
then ok deck_link; else fail deck_link; cat "$tmp/err"; fi

# The table names the configuration and labels the numbers as predictions.
if "$plan" "$inputs/deep_mlp.yaml" --ranks 2 >"$tmp/out" 2>&1 &&
   grep -q "predicted (not measured) on 2 ranks = 1 replicas (D) x 2 cells (K)" "$tmp/out" &&
   grep -q "samples/s, bubble" "$tmp/out"; then ok table; else fail table; cat "$tmp/out"; fi

# --sweep --json: rows and the index of the best.
if "$plan" "$inputs/deep_mlp.yaml" --ranks 4 --sweep --json >"$tmp/s.json" 2>"$tmp/err" &&
   "$python" - "$tmp/s.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows = s["rows"]
assert s["best"] >= 0 and rows
best = rows[s["best"]]["samples_per_s"]
assert all(r["samples_per_s"] <= best for r in rows)
assert {r["cells_count"] for r in rows} == {1, 2, 4}
PY
then ok sweep; else fail sweep; cat "$tmp/err"; fi

# --calibrate times the layers (MPI and Kokkos start) and writes the costs
# file; --costs reuses it and predicts exactly the same step.
if "$plan" "$inputs/fashion_mnist_mlp.yaml" --ranks 2 --calibrate "$tmp/costs.h5" --json >"$tmp/c1.json" 2>"$tmp/err" &&
   "$plan" "$inputs/fashion_mnist_mlp.yaml" --ranks 2 --costs "$tmp/costs.h5" --json >"$tmp/c2.json" 2>>"$tmp/err" &&
   cmp -s "$tmp/c1.json" "$tmp/c2.json" && ! cmp -s "$tmp/c1.json" <("$plan" "$inputs/fashion_mnist_mlp.yaml" --ranks 2 --json)
then ok calibrate; else fail calibrate; cat "$tmp/err"; fi
"$plan" "$inputs/deep_mlp.yaml" --ranks 2 --costs "$tmp/costs.h5" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "^gpipe-plan: error: $tmp/costs.h5: measured for another model" "$tmp/err"
then ok costs_mismatch; else fail "costs_mismatch (status $rc)"; cat "$tmp/err"; fi

# Bad input: exit 2 and one line naming the problem.
"$plan" "$inputs/deep_mlp.yaml" --ranks 4 --link ethernet >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -qx "gpipe-plan: error: --link: expected one of shm, 10GbE, hdr200, got 'ethernet'" "$tmp/err"
then ok bad_link; else fail "bad_link (status $rc)"; cat "$tmp/err"; fi
"$plan" "$inputs/deep_mlp.yaml" --ranks 3 --set parallel.cells=2 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "^gpipe-plan: error: .*parallel.cells" "$tmp/err"
then ok bad_grid; else fail "bad_grid (status $rc)"; cat "$tmp/err"; fi

# An invalid GPIPE_KERNELS decides nothing silently: a plan and --version fail as a run does (exit 2).
for args in "$inputs/deep_mlp.yaml --ranks 2" "--version"; do
  GPIPE_KERNELS=fast "$plan" $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq 2 ] &&
     grep -q "^gpipe-plan: error: environment variable GPIPE_KERNELS: unknown kernels 'fast' (expected auto, portable" "$tmp/err"
  then ok "bad_gpipe_kernels ($args)"; else fail "bad_gpipe_kernels ($args, status $rc)"; cat "$tmp/err"; fi
done

# --tune-trace with a trace of another M: its op times are for other micro-batch sizes (before: tuned
# silently from them). The trace is written by the unit tests' writer format: a tiny one by h5py.
if "$python" -c "import h5py" 2>/dev/null; then
  "$python" - "$tmp/m8.h5" <<'PY'
import sys, h5py, numpy as np
dt = np.dtype([("step", "<i8"), ("kind", "i1"), ("micro_batch", "<i4"), ("start", "<f8"), ("end", "<f8"), ("bytes", "<i8")])
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["cells"] = 2; f.attrs["micro_batches"] = 8; f.attrs["replicas"] = 1; f.attrs["schedule"] = "1f1b"
    for r in range(2):
        ev = [(1, 0, m, 2.0 * m, 2.0 * m + 1, 0) for m in range(8)] + [(1, 1, m, 20.0 + m, 20.5 + m, 0) for m in range(8)]
        f[f"rank_{r:04d}/events"] = np.array(ev, dtype=dt)
PY
  "$plan" "$inputs/deep_mlp.yaml" --ranks 2 --set training.micro_batches=4 --tune "$tmp/t.yaml" --tune-trace "$tmp/m8.h5" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq 2 ] && grep -qxF "gpipe-plan: error: $tmp/m8.h5: --tune-trace: the trace ran M = 8 micro-batches, the deck runs training.micro_batches = 4 (its ops' times are for other micro-batch sizes); trace a run of the deck's M" "$tmp/err" &&
     [ ! -e "$tmp/t.yaml" ] &&
     "$plan" "$inputs/deep_mlp.yaml" --ranks 2 --tune "$tmp/t.yaml" --tune-trace "$tmp/m8.h5" >"$tmp/out" 2>"$tmp/err" &&
     [ -s "$tmp/t.yaml" ]
  then ok tune_trace_other_micro_batches; else fail "tune_trace_other_micro_batches (status $rc)"; cat "$tmp/err"; fi
fi

# --tune with pipeline.w_group: the candidates are grouped as the deck's schedule is (before: ignored
# silently), the output says so naming the key, and the file holds the grouped W ops. A group keeps its
# micro-batches' activations until its W: within the default limit (K = 2 in flight) nothing fits.
"$plan" "$inputs/deep_mlp.yaml" --ranks 2 --set pipeline.schedule=zero_bubble --set pipeline.w_group=2 \
  --tune "$tmp/g.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && [ ! -e "$tmp/g.yaml" ] &&
   grep -qxF "gpipe-plan: error: --tune: no candidate fits the memory limit (at most 2 micro-batches of a rank's layers, --tune-in-flight); pipeline.w_group = 2 keeps each micro-batch's activations until its group's W: raise --tune-in-flight" "$tmp/err"
then ok tune_w_group_limit; else fail "tune_w_group_limit (status $rc)"; cat "$tmp/out" "$tmp/err"; fi
"$plan" "$inputs/deep_mlp.yaml" --ranks 2 --set pipeline.schedule=zero_bubble --set pipeline.w_group=2 \
  --tune "$tmp/g.yaml" --tune-in-flight 3 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 0 ] &&
   grep -qxF "  pipeline.w_group = 2: every candidate's W ops are grouped 2 micro-batches at a time, as the deck's own schedule's would be (the written file holds the grouped W ops)" "$tmp/out" &&
   grep -qF -- "--set pipeline.w_group=1: the file holds the grouped W ops)" "$tmp/out" &&
   grep -qE '^  - \[[0-9]+, [0-9]+, W, [0-9]+, 2\]$' "$tmp/g.yaml" &&
   "$plan" "$inputs/deep_mlp.yaml" --ranks 2 --set pipeline.schedule_file="$tmp/g.yaml" >/dev/null 2>>"$tmp/err"
then ok tune_w_group; else fail "tune_w_group (status $rc)"; cat "$tmp/out" "$tmp/err"; fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]

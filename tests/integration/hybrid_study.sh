#!/usr/bin/env bash
# scripts/scaling_study.sh hybrid and hybrid-weak on 2 ranks with a tiny
# workload: every run succeeds and OUT/hybrid.csv has the expected columns,
# one row per point, and an all-reduce overlap in [0, 1] exactly where D > 1.
# No timing is checked. Usage: hybrid_study.sh PATH/TO/gpipe-train PATH/TO/inputs MPIEXEC [PREFLAGS...]
set -u
exe=$1
inputs=$2
mpiexec=$3
shift 3
root="$(cd "$inputs/.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() {  # NAME STATUS OUTPUT
  if [ "$2" -eq 0 ]; then echo "ok   $1"; passed=$((passed + 1)); else echo "FAIL $1"$'\n'"$3"; failed=$((failed + 1)); fi
}
tiny=(--set data.test_limit=32 --set training.epochs=1 --set trace.every=1 --set training.progress_every=0)
export GPIPE_TRAIN="$exe" MPIRUN="$mpiexec" MPIRUN_ARGS="$*"

# check_csv CSV MODE: "D K" rows expected, in the CSV's order
check_csv() {
  python3 - "$@" <<'EOF'
import csv, math, sys
path, *want = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
columns = ["D", "K", "ranks", "M", "N", "repeats", "samples_per_second", "spread_percent", "relative",
           "step_seconds", "pipeline_comm_seconds_per_step", "data_parallel_comm_seconds_per_step",
           "allreduce_seconds_per_step", "pipeline_comm_share", "data_parallel_comm_share",
           "allreduce_overlap_fraction", "bubble_measured", "bubble_analytical", "load"]
header = next(csv.reader(open(path)))
assert header == columns, f"columns {header}"
got = [f"{r['D']} {r['K']}" for r in rows]
assert got == want, f"rows {got}, expected {want}"
for r in rows:
    assert float(r["samples_per_second"]) > 0, r
    assert int(r["D"]) * int(r["K"]) == int(r["ranks"]), r
    overlap = r["allreduce_overlap_fraction"]
    if int(r["D"]) > 1:
        assert 0.0 <= float(overlap) <= 1.0, f"overlap {overlap!r} not in [0, 1]: {r}"
        assert float(r["allreduce_seconds_per_step"]) > 0, r
    else:
        assert overlap == "", f"D = 1 has no all-reduce, overlap {overlap!r}"
    for share in ("pipeline_comm_share", "data_parallel_comm_share"):
        assert 0.0 <= float(r[share]) <= 1.0, r
print("rows", " | ".join(got))
EOF
}

# hybrid: 2 ranks as 2 x 1 and 1 x 2, fixed N = 32
out="$(bash "$root/scripts/scaling_study.sh" hybrid --max-ranks 2 --micro-batches 2 --batch 32 \
       --deck "$inputs/fashion_mnist_mlp.yaml" --out "$tmp/h" -- --set data.train_limit=128 "${tiny[@]}" 2>&1)"
check "hybrid study runs" $? "$out"
out2="$(check_csv "$tmp/h/hybrid.csv" "2 1" "1 2" 2>&1)"
check "hybrid.csv: columns, 2x1 and 1x2, overlap in [0, 1]" $? "$out"$'\n'"$out2"

# hybrid-weak: K = 1, D = 1, 2 with N = 16*D and data.train_limit = 64*D
out="$(bash "$root/scripts/scaling_study.sh" hybrid-weak --max-ranks 2 --micro-batches 2 --batch 16 \
       --deck "$inputs/fashion_mnist_mlp.yaml" --out "$tmp/w" -- --set data.train_limit=64 "${tiny[@]}" 2>&1)"
check "hybrid-weak study runs" $? "$out"
out2="$(check_csv "$tmp/w/hybrid.csv" "1 1" "2 1" 2>&1)"
check "hybrid-weak hybrid.csv: D = 1, 2" $? "$out"$'\n'"$out2"
n="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["batch_size"])' "$tmp/w/D2_K1_M2.json" 2>&1)"
[ "$n" = 32 ]; check "hybrid-weak: N = N0*D = 32 at D = 2" $? "batch_size $n"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

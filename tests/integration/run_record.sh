#!/usr/bin/env bash
# The run record of gpipe-train in the summary and the trace, and the log levels.
# Usage: run_record.sh PATH/TO/gpipe-train PATH/TO/inputs MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
exe=$1
deck=$2/fashion_mnist_mlp.yaml
mpiexec=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
args=(--set data.train_limit=512 --set data.test_limit=64 --set training.epochs=1
      --set training.progress_every=2 --set optimizer.lr=0.002 --set optimizer.schedule=constant
      --set kernels=portable)

# --quiet: nothing on stdout; the summary and the trace carry the record.
SLURM_JOB_ID=4242 "$mpiexec" -n 2 "$@" "$exe" "$deck" "${args[@]}" --quiet --summary "$tmp/s.json" \
  --trace "$tmp/t.h5" >"$tmp/out" 2>"$tmp/err"
status=$?
if [ "$status" -eq 0 ] && [ ! -s "$tmp/out" ]; then echo "ok   --quiet: exit 0, no output"; passed=$((passed + 1))
else echo "FAIL --quiet: status $status, stdout: $(cat "$tmp/out") stderr: $(cat "$tmp/err")"; failed=$((failed + 1)); fi
h5dump -a /run_record "$tmp/t.h5" >"$tmp/attr" 2>&1
python3 - "$tmp/s.json" "$tmp/attr" "$deck" <<'PYEOF'
import json, re, sys
s = json.load(open(sys.argv[1]))
attr = open(sys.argv[2]).read()
r = s["run"]
t = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
checks = {
    "command line": r["command_line"][1:3] == [sys.argv[3], "--set"] and "--quiet" in r["command_line"],
    "effective deck after --set": "lr: 0.002" in r["effective_deck"] and "train_limit: 512" in r["effective_deck"],
    "seed": r["seed"] == 42,
    "ranks and hosts": r["ranks"] == 2 and len(r["rank_hosts"]) == 2
                       and sorted(sum(r["hosts"].values(), [])) == [0, 1],
    "Slurm job id": r["slurm_job_id"] == "4242",
    "versions": all(r["versions"].get(k) for k in ("gpipe", "kokkos", "mpi", "hdf5")),
    "kernels (deck's kernels: portable)": r["kernels"]["built"].startswith("kernels: portable (")
                and r["kernels"]["selected"].startswith("portable: gemm float portable, gemm double portable,"),
    "start and end time": bool(t.match(r["start_time"])) and bool(t.match(r["end_time"]))
                          and r["start_time"] <= r["end_time"],
    "machine load": isinstance(s["machine_load"]["start"], float) and "end" in s["machine_load"],
    "samples": s["train_samples"] == 512 and s["test_samples"] == 64,
    "trace attribute run_record": "slurm_job_id" in attr and "effective_deck" in attr,
}
bad = [k for k, v in checks.items() if not v]
for k, v in checks.items():
    print(("ok   " if v else "FAIL ") + k)
if bad:
    print(json.dumps(r, indent=1)[:3000])
sys.exit(len(bad))
PYEOF
n=$?
passed=$((passed + 11 - n)); failed=$((failed + n))

# default: progress lines with time of day, lr and ETA; --verbose: timestamped debug record
"$mpiexec" -n 1 "$@" "$exe" "$deck" "${args[@]}" --verbose >"$tmp/v.out" 2>&1
if grep -Eq "^  [0-9]{2}:[0-9]{2}:[0-9]{2}  epoch 1/1  step +2/4  loss [0-9.]+  lr 0.002  [0-9]+ samples/s  ETA [0-9]+:[0-9]{2}:[0-9]{2}$" "$tmp/v.out" \
   && grep -Eq "^\[[0-9-]+ [0-9:.]+\] gpipe-train: debug: run record: \{" "$tmp/v.out"; then
  echo "ok   progress line and --verbose record"; passed=$((passed + 1))
else echo "FAIL progress/verbose: $(cat "$tmp/v.out")"; failed=$((failed + 1)); fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

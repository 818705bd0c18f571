#!/usr/bin/env bash
# The batch-job scripts' logic without a cluster or a run: the Slurm job body
# (scripts/slurm/scaling_job.sh through the .sbatch files) and the study
# scripts in their dry-run modes, scripts/dataset_samples.py on a generated IDX
# file, and plot_scaling.py on repeated points.
# usage: test_batch_scripts.sh SOURCE_DIR
set -uo pipefail
root="$(cd "$1" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2
passed=0 failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# expect NAME STATUS PATTERN OUTPUT: exit status and an extended regex the output must match
expect() {
  local name="$1" want="$2" status="$3" pattern="$4" output="$5"
  if [ "$status" -ne "$want" ]; then fail "$name: exit status $status, expected $want"$'\n'"$output"; return; fi
  if ! grep -Eq -- "$pattern" <<<"$output"; then fail "$name: no match for '$pattern' in"$'\n'"$output"; return; fi
  ok
}
count() { grep -c -- "$1" <<<"$2"; }

# ---- Slurm job body, dry run: a sweep of (K, M) points in one job
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=2 \
       SLURM_TASKS_PER_NODE="2(x2)" KS="1 2 4" MS="1 4" OUT="$work/s" \
       bash scripts/slurm/strong_scaling.sbatch 2>&1)"
expect "sweep runs" 0 $? "K in \{1 2 4\}, M in \{1 4\}" "$out"
[ "$(count '^srun ' "$out")" -eq 6 ] && ok || fail "sweep: expected 6 job steps"$'\n'"$out"
[ "$(count '--cpus-per-task=2' "$out")" -eq 6 ] && ok || fail "srun lacks --cpus-per-task=2"$'\n'"$out"
expect "K=4 spans 2 nodes" 0 0 "srun --ntasks=4 --nodes=2 .*training.micro_batches=4 --summary $work/s/K4_M4.json" "$out"
expect "K=1 on 1 node" 0 0 "srun --ntasks=1 --nodes=1 " "$out"

# one point (K = the job's tasks), repeated, with GPUs: one GPU per task
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=2 SLURM_GPUS_ON_NODE=2 \
       M=2 REPEATS=3 OUT="$work/g" bash scripts/slurm/strong_scaling.sbatch 2>&1)"
expect "GPU point" 0 $? "srun --ntasks=2 --nodes=1 --cpus-per-task=1 --gpus-per-task=1 .*K2_M2_r3.json" "$out"
[ "$(count '^srun ' "$out")" -eq 3 ] && ok || fail "REPEATS=3: expected 3 job steps"$'\n'"$out"
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=4 SLURM_GPUS_ON_NODE=2 \
       M=2 OUT="$work/g" bash scripts/slurm/strong_scaling.sbatch 2>&1)"
expect "too few GPUs" 2 $? "2 GPUs per node for 4 ranks per node" "$out"
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=2 KS="1 4" M=2 \
       OUT="$work/g" bash scripts/slurm/strong_scaling.sbatch 2>&1)"
expect "K beyond the job" 2 $? "K = 4 > the job's 2 tasks" "$out"

# weak scaling never asks for more samples than the data set holds
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=4 KS="2 4" M=2 \
       DATASET_SAMPLES=60000 OUT="$work/w" bash scripts/slurm/weak_scaling.sbatch 2>&1)"
expect "weak refuses K=4" 1 $? "K=4: REFUSED: weak scaling needs data.train_limit = 15360\*4 = 61440 samples but the training data holds 60000" "$out"
expect "weak K=2 scaled" 0 0 "srun --ntasks=2 .*training.batch_size=512 .*--set data.train_limit=30720" "$out"

# the templates: exclusive nodes for timing, the stop signal with a margin
for f in scripts/slurm/strong_scaling.sbatch scripts/slurm/weak_scaling.sbatch scripts/slurm/train.sbatch; do
  grep -q '^#SBATCH --signal=USR1@' "$f" && ok || fail "$f: no #SBATCH --signal=USR1@margin"
done
for f in scripts/slurm/strong_scaling.sbatch scripts/slurm/weak_scaling.sbatch; do
  grep -q '^#SBATCH --exclusive' "$f" && ok || fail "$f: timing job without #SBATCH --exclusive"
done

# ---- submit_study.sh: one job for all points; weak refused up front
out="$(DATASET_SAMPLES=60000 bash scripts/slurm/submit_study.sh strong --ranks "1 2 8" --micro-batches "4 16" \
       --tasks-per-node 4 --repeats 2 --one-job --dry-run 2>&1)"
expect "one job" 0 $? "KS=\"1 2 8\" MS=\"4 16\" REPEATS=2 N=256 sbatch --parsable --job-name=gpipe-strong-sweep --nodes=2 --ntasks=8 --ntasks-per-node=4" "$out"
[ "$(count 'sbatch ' "$out")" -eq 1 ] && ok || fail "--one-job: expected one sbatch"$'\n'"$out"
out="$(DATASET_SAMPLES=60000 bash scripts/slurm/submit_study.sh weak --ranks "1 2 4" --dry-run 2>&1)"
expect "submit weak refused" 2 $? "weak scaling at K=4 needs data.train_limit = 15360\*4 = 61440 samples but the training data holds 60000; lower it to 15000" "$out"
out="$(DATASET_SAMPLES=60000 bash scripts/slurm/submit_study.sh weak --ranks "1 4" --dry-run -- --set data.train_limit=15000 2>&1)"
expect "submit weak with a lower limit" 0 $? "K=4 M=32: .*N0=256 sbatch" "$out"

# ---- local study: refusal and repeats
out="$(DATASET_SAMPLES=60000 MPIRUN=false bash scripts/scaling_study.sh weak --max-ranks 4 --dry-run 2>&1)"
expect "local weak refused" 2 $? "needs data.train_limit = 15360\*4 = 61440 samples but the training data holds 60000; pass data.train_limit=15000" "$out"
out="$(DATASET_SAMPLES=60000 MPIRUN=false bash scripts/scaling_study.sh strong --max-ranks 2 --micro-batches 4 \
       --repeats 3 --out "$work/l" --dry-run 2>&1)"
expect "local repeats" 0 $? "-n 2 .*--summary $work/l/K2_M4_r3.json" "$out"
[ "$(count 'gpipe-train ' "$out")" -eq 6 ] && ok || fail "local: expected 2 K x 3 repeats"$'\n'"$out"

# ---- hybrid data x pipeline: the Slurm job body passes D and K (parallel.cells)
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=2 \
       SLURM_TASKS_PER_NODE="2(x2)" MS="4" OUT="$work/h" bash scripts/slurm/hybrid_scaling.sbatch 2>&1)"
expect "hybrid job" 0 $? "D x K in \{4x1, 2x2, 1x4\}" "$out"
[ "$(count '^srun --ntasks=4 --nodes=2 --cpus-per-task=2 ' "$out")" -eq 3 ] && ok \
  || fail "hybrid: expected 3 job steps on all 4 ranks with --cpus-per-task=2"$'\n'"$out"
expect "hybrid D=2 K=2" 0 0 "training.batch_size=256 .*--set parallel.cells=2 --summary $work/h/D2_K2_M4.json" "$out"
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=4 KS="3" M=4 OUT="$work/h" \
       bash scripts/slurm/hybrid_scaling.sbatch 2>&1)"
expect "hybrid K not dividing" 2 $? "K = 3 does not divide the job's 4 tasks" "$out"
out="$(env -i PATH="$PATH" GPIPE_DRY_RUN=1 GPIPE_ROOT="$root" SLURM_NTASKS=8 SLURM_TASKS_PER_NODE="4(x2)" \
       CELLS=2 M=4 N0=32 TRAIN_LIMIT=20000 DATASET_SAMPLES=60000 OUT="$work/hw" \
       bash scripts/slurm/hybrid_weak_scaling.sbatch 2>&1)"
expect "hybrid-weak refuses D=4" 1 $? "D=4 K=2: REFUSED: weak scaling needs data.train_limit = 20000\*4 = 80000" "$out"
expect "hybrid-weak D=2" 0 0 "srun --ntasks=4 --nodes=1 .*training.batch_size=64 .*parallel.cells=2 .*D2_K2_M4.json .*data.train_limit=40000" "$out"
expect "hybrid-weak D=1" 0 0 "srun --ntasks=2 --nodes=1 .*training.batch_size=32 .*D1_K2_M4.json .*data.train_limit=20000" "$out"
for f in scripts/slurm/hybrid_scaling.sbatch scripts/slurm/hybrid_weak_scaling.sbatch; do
  grep -q '^#SBATCH --exclusive' "$f" && grep -q '^#SBATCH --signal=USR1@' "$f" && ok \
    || fail "$f: needs #SBATCH --exclusive and --signal=USR1@margin"
done
out="$(bash scripts/slurm/submit_study.sh hybrid --ranks 8 --micro-batches "4 8" --tasks-per-node 4 --dry-run 2>&1)"
expect "submit hybrid" 0 $? "MS=\"4 8\" REPEATS=1 N=256 sbatch --parsable --job-name=gpipe-hybrid --nodes=2 --ntasks=8 --ntasks-per-node=4 .*hybrid_scaling.sbatch" "$out"
out="$(DATASET_SAMPLES=60000 bash scripts/slurm/submit_study.sh hybrid-weak --cells 2 --replicas "1 2 4" \
       --micro-batches 8 --tasks-per-node 4 --dry-run -- --set data.train_limit=10000 2>&1)"
expect "submit hybrid-weak" 0 $? "CELLS=2 DS=\"1 2 4\" N0=256 sbatch .*--nodes=2 --ntasks=8 .*hybrid_weak_scaling.sbatch" "$out"

# ---- local hybrid studies (dry run)
out="$(MPIRUN=false bash scripts/scaling_study.sh hybrid --max-ranks 4 --micro-batches "2 4" --out "$work/lh" \
       --dry-run 2>&1)"
expect "local hybrid" 0 $? "-n 4 .*training.micro_batches=4 --summary $work/lh/D2_K2_M4.json .*--set parallel.cells=2" "$out"
[ "$(count 'gpipe-train ' "$out")" -eq 6 ] && ok || fail "local hybrid: expected 3 splits x 2 M"$'\n'"$out"
out="$(DATASET_SAMPLES=60000 MPIRUN=false bash scripts/scaling_study.sh hybrid-weak --max-ranks 4 --cells 2 \
       --micro-batches 4 --out "$work/lw" --dry-run -- --set data.train_limit=1000 2>&1)"
expect "local hybrid-weak" 0 $? "-n 4 .*training.batch_size=512 .*D2_K2_M4.json .*parallel.cells=2 .*data.train_limit=2000$" "$out"
[ "$(count 'gpipe-train ' "$out")" -eq 2 ] && ok || fail "local hybrid-weak: expected D = 1, 2"$'\n'"$out"

# ---- plot_scaling.py on a hybrid study: the CSV (no matplotlib needed with --no-plot)
mkdir -p "$work/hc"
python3 - "$work/hc" <<'EOF'
import json, sys
d = sys.argv[1]
json.dump({"mode": "hybrid", "N0": 64, "deck": "x.yaml", "max_ranks": 2}, open(f"{d}/study.json", "w"))
def run(D, K, r, x, comm):
    json.dump({"ranks": D * K, "replicas": D, "cells": K, "micro_batches": 4, "batch_size": 64,
               "samples_per_second": x, "bubble_fraction_analytical": (K - 1) / (4 + K - 1),
               "communication": comm, "machine_load": {"start": 1.5}}, open(f"{d}/D{D}_K{K}_M4_r{r}.json", "w"))
for r, x in ((1, 190.0), (2, 200.0), (3, 210.0)):
    run(2, 1, r, x, {"pipeline_seconds_per_step": 0.0, "data_parallel_seconds_per_step": 0.01,
                     "allreduce_seconds_per_step": 0.05, "allreduce_overlap_fraction": 0.8})
run(1, 2, 1, 160.0, {"pipeline_seconds_per_step": 0.002, "data_parallel_seconds_per_step": 0.0,
                     "allreduce_seconds_per_step": 0.0, "allreduce_overlap_fraction": 0.0})
EOF
out="$(python3 scripts/plot_scaling.py "$work/hc" --no-plot 2>&1)"
expect "hybrid table" 0 $? "^  2   1    4     64     200.00     1.250       0.00      3.12   0.800    3    10.0  1.50$" "$out"
# 2x1: median 200, relative 200/160, step 64/200 = 0.32 s, data-parallel share 0.01/0.32; 1x2: no all-reduce
expect "hybrid csv header" 0 0 "^D,K,ranks,M,N,repeats,samples_per_second,spread_percent,relative,step_seconds,pipeline_comm_seconds_per_step,data_parallel_comm_seconds_per_step,allreduce_seconds_per_step,pipeline_comm_share,data_parallel_comm_share,allreduce_overlap_fraction,bubble_measured,bubble_analytical,load$" "$(cat "$work/hc/hybrid.csv")"
expect "hybrid csv 2x1" 0 0 "^2,1,2,4,64,3,200.00,10.0,1.250,0.32,0,0.01,0.05,0.0000,0.0312,0.800,,0.000,1.50$" "$(cat "$work/hc/hybrid.csv")"
expect "hybrid csv 1x2" 0 0 "^1,2,2,4,64,1,160.00,0.0,1.000,0.4,0.002,0,0,0.0050,0.0000,,,0.200,1.50$" "$(cat "$work/hc/hybrid.csv")"

# ---- dataset_samples.py on a generated IDX label file (gzip) and on a bad deck
python3 - "$work" <<'EOF'
import gzip, struct, sys
with gzip.open(f"{sys.argv[1]}/labels.gz", "wb") as f:
    f.write(struct.pack(">BBBBI", 0, 0, 8, 1, 1234) + bytes(1234))
open(f"{sys.argv[1]}/deck.yaml", "w").write(
    f"data: {{format: idx, train_labels: {sys.argv[1]}/labels.gz}}\n")
EOF
out="$(python3 scripts/dataset_samples.py "$work/deck.yaml" 2>&1)"
expect "dataset_samples" 0 $? "^1234$" "$out"
out="$(python3 scripts/dataset_samples.py "$work/deck.yaml" --set "data.train_labels=$work/none.gz" 2>/dev/null)"
expect "dataset_samples unknown" 0 $? "^0$" "$out"

# ---- plot_scaling.py: repeats give the median, the spread and the load
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import matplotlib' 2>/dev/null; then py="$p"; break; fi
done
if [ -n "$py" ]; then
  mkdir -p "$work/p"
  "$py" - "$work/p" <<'EOF'
import json, sys
d = sys.argv[1]
json.dump({"mode": "strong", "N0": 64, "deck": "x.yaml"}, open(f"{d}/study.json", "w"))
for k, xs in ((1, (100.0, 90.0, 110.0)), (2, (150.0, 190.0, 180.0))):
    for r, x in enumerate(xs, 1):
        json.dump({"ranks": k, "micro_batches": 4, "batch_size": 64, "samples_per_second": x,
                   "bubble_fraction_analytical": (k - 1) / (4 + k - 1),
                   "machine_load": {"start": 0.5 * r}}, open(f"{d}/K{k}_M4_r{r}.json", "w"))
EOF
  out="$("$py" scripts/plot_scaling.py "$work/p" -o "$work/p/s.png" 2>&1)"
  # K=2: median 180 / median 100 = 1.8; spread (190-150)/180 = 22.2 %; load max 1.50
  expect "plot repeats" 0 $? "^  2    4     64      180.0            1.800      0.900 .* 3    22.2  1.50$" "$out"
  expect "plot repeats K=1" 0 0 "^  1    4     64      100.0 .* 3    20.0  1.50$" "$out"
  # plot_training.py: the history of a summary, as a table and a PNG
  "$py" -c 'import json, sys; json.dump({"history": [{"epoch": 1, "train_loss": 0.5, "test_loss": 0.4,
      "test_accuracy": 0.85}, {"epoch": 2, "train_loss": 0.25, "test_loss": 0.3, "test_accuracy": 0.9}]},
      open(sys.argv[1], "w"))' "$work/p/run.json"
  out="$("$py" scripts/plot_training.py "$work/p/run.json" 2>&1)"
  expect "plot_training" 0 $? "^    2     0.2500     0.3000    0.9000$" "$out"
  [ -s "$work/p/run.png" ] && ok || fail "plot_training.py wrote no $work/p/run.png"
  out="$("$py" scripts/plot_training.py "$work/p/study.json" 2>&1)"
  expect "plot_training bad input" 1 $? "study.json: missing key 'history'" "$out"
else
  echo "skipped: plot_scaling.py, plot_training.py (no python3 with matplotlib)"
fi

# ---- train.sbatch: one folder per experiment, resumed only by the same one
tj="$work/train"; mkdir -p "$tj"; cp inputs/heat1d_surrogate.yaml "$tj/deck.yaml"
train_job() {  # environment assignments...; runs the job body in $tj (dry run)
  (cd "$tj" && env -i PATH="$PATH" GPIPE_DRY_RUN=1 SLURM_NTASKS=2 "$@" bash "$root/scripts/slurm/train.sbatch" 2>&1)
}
out="$(train_job DECK=deck.yaml EXTRA_ARGS="--set optimizer.lr=1e-3")"
expect "train: experiment from deck and overrides" 0 $? \
  "experiment deck-[0-9a-f]{10} in checkpoints/deck-[0-9a-f]{10}" "$out"
exp1="$(grep -oE 'checkpoints/deck-[0-9a-f]{10}' <<<"$out" | head -n 1)"
expect "train: the folder's summary and metrics stream" 0 0 \
  "srun --cpus-per-task=1 build/apps/gpipe-train deck.yaml --set checkpoint.directory=$exp1 --summary $exp1/summary.json --metrics $exp1/metrics.jsonl --set optimizer.lr=1e-3$" "$out"
out="$(train_job DECK=deck.yaml EXTRA_ARGS="--set optimizer.lr=1e-3")"
[ "$(grep -oE 'checkpoints/deck-[0-9a-f]{10}' <<<"$out" | head -n 1)" = "$exp1" ] && ok \
  || fail "the same deck and overrides gave another folder"$'\n'"$out"
out="$(train_job DECK=deck.yaml EXTRA_ARGS="--set optimizer.lr=2e-3")"
exp2="$(grep -oE 'checkpoints/deck-[0-9a-f]{10}' <<<"$out" | head -n 1)"
[ -n "$exp2" ] && [ "$exp2" != "$exp1" ] && ok || fail "another override, the same folder $exp1"$'\n'"$out"
# a folder with the experiment's record and a checkpoint: resumed (--restart latest)
mkdir -p "$tj/$exp1"
(cd "$tj" && { printf 'deck: deck.yaml\nkey: %s\n' "${exp1##*-}"; printf 'set: optimizer.lr=1e-3\n'; } >"$exp1/experiment.txt")
touch "$tj/$exp1/ckpt_000000040_0123456789abcdef.h5"
out="$(train_job DECK=deck.yaml EXTRA_ARGS="--set optimizer.lr=1e-3")"
expect "train: the same experiment resumes" 0 $? "resuming \(--restart latest\).*"$'\n'".*--restart latest --summary" "$out"
echo "job 7 at then" >"$tj/$exp1/complete"
out="$(train_job DECK=deck.yaml EXTRA_ARGS="--set optimizer.lr=1e-3")"
expect "train: a complete experiment runs nothing" 0 $? "experiment 'deck-[0-9a-f]{10}' is complete \(job 7 at then\): nothing to run" "$out"
[ "$(count '^srun ' "$out")" -eq 0 ] && ok || fail "train: srun ran for a complete experiment"$'\n'"$out"
rm "$tj/$exp1/complete"
# a named experiment reused for another deck: an error listing the choices, nothing run
out="$(train_job DECK=deck.yaml EXPERIMENT="${exp1#checkpoints/}" EXTRA_ARGS="--set optimizer.lr=5e-3")"
expect "train: another deck's folder refused" 2 $? "holds experiment 'deck-[0-9a-f]{10}' of another deck or other overrides" "$out"
expect "train: the choices" 0 0 "a new experiment: unset EXPERIMENT.*" "$out"
expect "train: the recorded overrides shown" 0 0 "set: optimizer.lr=1e-3" "$out"
[ "$(count '^srun ' "$out")" -eq 0 ] && ok || fail "train: srun ran despite the error"$'\n'"$out"
# checkpoints without the record (not this script's folder): refused too
mkdir -p "$tj/checkpoints/old"; touch "$tj/checkpoints/old/ckpt_000000001.h5"
out="$(train_job DECK=deck.yaml CKPT_DIR=checkpoints/old)"
expect "train: a folder of unknown checkpoints refused" 2 $? "holds checkpoints but no experiment.txt" "$out"
out="$(train_job DECK=deck.yaml EXPERIMENT="a b")"
expect "train: a bad experiment name" 2 $? "EXPERIMENT='a b': use letters, digits" "$out"
out="$(train_job DECK=deck.yaml EXTRA_ARGS="--summary s.json")"
expect "train: --summary given replaces the default" 0 $? "--metrics checkpoints/deck-[0-9a-f]{10}/metrics.jsonl --summary s.json$" "$out"
# the template: no fixed tasks per node, appended log, requeue, the signal
grep -q '^#SBATCH --ntasks-per-node' scripts/slurm/train.sbatch && fail "train.sbatch fixes --ntasks-per-node" || ok
grep -q '^#SBATCH --open-mode=append' scripts/slurm/train.sbatch && ok || fail "train.sbatch: log not appended across requeues"
grep -q '^#SBATCH --requeue' scripts/slurm/train.sbatch && ok || fail "train.sbatch: not requeueable"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/bash
# The train.sbatch chain of docs/scaling-studies.md ("Long runs on Slurm") on a
# (single-node) Slurm, from the repository root: experiment 1 signalled and
# requeued, experiment 2 signalled and resubmitted, experiment 1 resubmitted
# after it completed, and its name reused for other overrides (an error).
# Removes ./checkpoints and ./gpipe-train-*.out first. Needs data/heat1d_*.h5
# (made if missing). usage: scripts/slurm/demo_chain.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf checkpoints gpipe-train-*.out
[ -f data/heat1d_train.h5 ] || /usr/bin/python3 scripts/make_heat1d_data.py data
say() { echo; echo "\$ $*"; }
wait_for() {  # JOBID PATTERN: until the job's log matches
  for _ in $(seq 1 300); do grep -qE "$2" "gpipe-train-$1.out" 2>/dev/null && return 0; sleep 1; done
  echo "timeout waiting for '$2' in job $1"; return 1
}
wait_gone() { while squeue -h -j "$1" 2>/dev/null | grep -q .; do sleep 2; done; }
common="GPIPE_TRAIN=${GPIPE_TRAIN:-build/apps/gpipe-train},DECK=inputs/heat1d_surrogate.yaml"
epochs="--set training.epochs=12 --set training.progress_every=16"
say "sbatch --ntasks=2 --export=ALL,DECK=inputs/heat1d_surrogate.yaml,REQUEUE=1,EXTRA_ARGS=\"$epochs\" scripts/slurm/train.sbatch"
A=$(sbatch --parsable --ntasks=2 --export=ALL,$common,REQUEUE=1,EXTRA_ARGS="$epochs" scripts/slurm/train.sbatch)
echo "Submitted batch job $A"
wait_for "$A" "epoch 3/12:"
say "scancel --signal=USR1 $A"
scancel --signal=USR1 "$A"
wait_for "$A" "^stopped before the time limit"
sleep 2
say "scontrol show job $A | grep -E 'JobState|Restarts|SubmitTime'"
scontrol show job "$A" | grep -E "JobState|Restarts|SubmitTime" | sed 's/^ *//'
say "sbatch --ntasks=2 --export=ALL,DECK=inputs/heat1d_surrogate.yaml,EXTRA_ARGS=\"$epochs --set optimizer.lr=1e-3\" scripts/slurm/train.sbatch"
B=$(sbatch --parsable --ntasks=2 --export=ALL,$common,EXTRA_ARGS="$epochs --set optimizer.lr=1e-3" scripts/slurm/train.sbatch)
echo "Submitted batch job $B"
wait_for "$B" "epoch 4/12:"
say "scancel --signal=USR1 $B"
scancel --signal=USR1 "$B"
wait_gone "$B"
say "sbatch ... (the same line again: a resubmission)"
B2=$(sbatch --parsable --ntasks=2 --export=ALL,$common,EXTRA_ARGS="$epochs --set optimizer.lr=1e-3" scripts/slurm/train.sbatch)
echo "Submitted batch job $B2"
wait_gone "$B2"
wait_for "$A" "summary written"
wait_gone "$A"
say "sbatch ... (the first experiment's line again, after it completed)"
C=$(sbatch --parsable --ntasks=2 --export=ALL,$common,REQUEUE=1,EXTRA_ARGS="$epochs" scripts/slurm/train.sbatch)
wait_gone "$C"
cat "gpipe-train-$C.out"
exp1=$(ls checkpoints | head -n 1)
say "sbatch --ntasks=2 --export=ALL,DECK=inputs/heat1d_surrogate.yaml,EXPERIMENT=$exp1,EXTRA_ARGS=\"--set optimizer.lr=5e-3\" scripts/slurm/train.sbatch"
D=$(sbatch --parsable --ntasks=2 --export=ALL,$common,EXPERIMENT="$exp1",EXTRA_ARGS="--set optimizer.lr=5e-3" scripts/slurm/train.sbatch)
wait_gone "$D"
cat "gpipe-train-$D.out"
echo "JOBS A=$A B=$B B2=$B2 C=$C D=$D"

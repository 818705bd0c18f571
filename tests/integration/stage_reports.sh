#!/usr/bin/env bash
# What gpipe-train reports for runs of several stages per cell or a schedule
# file (--check: no MPI, no Kokkos): each stage's cell from the schedule's
# stage map (zb_v's V put stages 2 and 3 on cells 0 and 1, the k mod K of
# interleaved_1f1b, before), a schedule file's stage map [1, 0] as stages,
# "schedule file F" instead of the deck's unused pipeline.schedule, and the
# partition errors naming stages.
# Usage: stage_reports.sh gpipe-train gpipe-plan INPUTS
set -u
train=$1 plan=$2 inputs=$3
deck=$inputs/fashion_mnist_mlp.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 passed=0
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
ok() { echo "ok   $1"; passed=$((passed + 1)); }
# expect NAME PATTERN FILE: the fixed string PATTERN is a line of FILE.
expect() {
  if grep -qxF -- "$2" "$3"; then ok "$1"; else fail "$1: no line '$2' in:"; cat "$3"; fi
}
stages() { grep -o '^  stage [0-9]* on cell [0-9]*' "$1" | tr '\n' ';'; }

"$train" "$deck" --check --ranks 2 --set pipeline.schedule=zb_v >"$tmp/zbv" 2>&1 || fail "zb_v --check"
[ "$(stages "$tmp/zbv")" = "  stage 0 on cell 0;  stage 1 on cell 1;  stage 2 on cell 1;  stage 3 on cell 0;" ] \
  && ok "zb_v: the V's stage map" || { fail "zb_v: stage map"; cat "$tmp/zbv"; }
"$train" "$deck" --check --ranks 3 --set pipeline.schedule=dualpipe_v --set training.micro_batches=6 >"$tmp/dpv" 2>&1 \
  || fail "dualpipe_v --check"
[ "$(stages "$tmp/dpv")" = "  stage 0 on cell 0;  stage 1 on cell 1;  stage 2 on cell 2;  stage 3 on cell 2;  stage 4 on cell 1;  stage 5 on cell 0;" ] \
  && ok "dualpipe_v: the V's stage map" || { fail "dualpipe_v: stage map"; cat "$tmp/dpv"; }
"$train" "$deck" --check --ranks 2 --set pipeline.schedule=interleaved_1f1b --set pipeline.chunks=2 >"$tmp/il" 2>&1 \
  || fail "interleaved --check"
[ "$(stages "$tmp/il")" = "  stage 0 on cell 0;  stage 1 on cell 1;  stage 2 on cell 0;  stage 3 on cell 1;" ] \
  && ok "interleaved_1f1b: stage k on cell k mod K" || { fail "interleaved: stage map"; cat "$tmp/il"; }

# A 1f1b file with the stage map reversed: stage 0 on rank 1.
"$plan" "$deck" --ranks 2 --schedule 1f1b --print >"$tmp/s.yaml" || fail "--print"
sed -i 's/^rank_of_stage: \[0, 1\]$/rank_of_stage: [1, 0]/; s/^  - \[0, 0,/  - [X, 0,/; s/^  - \[1, 1,/  - [0, 1,/; s/^  - \[X, 0,/  - [1, 0,/' "$tmp/s.yaml"
"$train" "$deck" --check --ranks 2 --set pipeline.schedule_file="$tmp/s.yaml" >"$tmp/rev" 2>&1 || { fail "rev --check"; cat "$tmp/rev"; }
[ "$(stages "$tmp/rev")" = "  stage 0 on cell 1;  stage 1 on cell 0;" ] \
  && ok "schedule file: its stage map" || { fail "schedule file: stage map"; cat "$tmp/rev"; }
expect "schedule file: the run line names the file" \
  "gpipe-train: 2 ranks (cells), 7 layers, precision float, mini-batch 128 in 8 micro-batches, schedule file $tmp/s.yaml, re-materialization from the schedule file" \
  "$tmp/rev"
expect "schedule file: no analytical bubble" "  imbalance (max/mean cell cost) 1.331; schedule file $tmp/s.yaml" "$tmp/rev"

"$train" "$deck" --check --ranks 4 --set pipeline.schedule=zb_v >"$tmp/err" 2>&1
expect "zb_v on too many cells: stages, not ranks" \
  "gpipe-train: error: pipeline: 8 stages (pipeline.schedule zb_v: two per cell on 4 cells) but the model has only 7 layers; every stage needs at least one layer (run with at most 3 cells)" \
  "$tmp/err"
echo "stage_reports: $passed passed, $failures failed"
[ "$failures" -eq 0 ]

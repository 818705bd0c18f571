#!/usr/bin/env bash
# Pipeline throughput for K = 1, 2 and M = 1, 2, 4, 8, 16 on the deep deck,
# against the ideal K*M/(M+K-1) x the one-cell throughput at the same M.
# Usage: perf/pipeline_vs_ideal.sh [OUT_DIR [--set KEY=VALUE ...]]   (about 3 minutes on 2 cores)
# e.g. perf/pipeline_vs_ideal.sh runs/ideal-1f1b --set pipeline.schedule=1f1b
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-runs/pipeline-ideal}
shift || true
scripts/scaling_study.sh strong --max-ranks 2 --micro-batches "1 2 4 8 16" --out "$out" \
  -- --set data.train_limit=5120 --set data.test_limit=256 "$@"
/usr/bin/python3 perf/pipeline_vs_ideal.py "$out"

#!/usr/bin/env bash
# The capacity study (docs/scaling-studies.md, "Capacity"): the largest GPT
# that trains one step within a per-rank memory budget at K = 1, 2, 4, 8,
# re-materialization never and always (planner search, one real step at the
# boundary, the next size refused), and gpipe-plan's extrapolation to GPU
# nodes. Options: scripts/capacity_study.py --help.
#   scripts/capacity_study.sh --out runs/capacity             # about 9 minutes on 2 cores
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
[ -f "$root/data/kjv_train.h5" ] || /usr/bin/python3 "$here/make_text_data.py" "$root/data"
exec /usr/bin/python3 "$here/capacity_study.py" "$@"

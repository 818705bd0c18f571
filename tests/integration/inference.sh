#!/usr/bin/env bash
# gpipe-infer end to end on generated regression data: train a K = 2 pipeline
# (2 ranks), infer on 1 and on 3 ranks (bitwise the same predictions), and
# reproduce the predictions with h5py + numpy (scripts/predict_numpy.py,
# the docs/inference.md example) to 1e-5.
# Usage: inference.sh SOURCE_DIR GPIPE_TRAIN GPIPE_INFER PYTHON MPIEXEC [MPIEXEC_FLAGS...]
set -eu
src=$1 train=$2 infer=$3 python=$4 mpiexec=$5
shift 5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$python" "$src/scripts/make_heat1d_data.py" "$tmp" --train 256 --test 61 >/dev/null
"$mpiexec" -n 2 "$@" "$train" "$src/inputs/heat1d_surrogate.yaml" \
  --set data.train_file="$tmp/heat1d_train.h5" --set data.test_file="$tmp/heat1d_test.h5" \
  --set training.epochs=2 --set training.batch_size=32 --set checkpoint.directory="$tmp/ckpt" \
  --set checkpoint.every_epochs=2 --summary "$tmp/summary.json" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; exit 1; }
grep -q '"test_metrics"' "$tmp/summary.json" || { echo "FAIL: no test_metrics in the summary"; exit 1; }
ckpt=$(ls "$tmp"/ckpt/ckpt_*.h5)
for ranks in 1 3; do
  "$mpiexec" -n $ranks "$@" "$infer" "$ckpt" --input "$tmp/heat1d_test.h5" \
    --output "$tmp/pred$ranks.h5" --batch-size 16 >"$tmp/infer$ranks.log" 2>&1 ||
    { cat "$tmp/infer$ranks.log"; exit 1; }
done
"$python" - "$tmp/pred1.h5" "$tmp/pred3.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["predictions"][()] for p in sys.argv[1:3])
assert a.shape == (61, 32), a.shape
if not np.array_equal(a, b):
    sys.exit(f"FAIL: 1-rank and 3-rank predictions differ (max {np.max(np.abs(a - b))})")
print("ok   1-rank and 3-rank predictions are bitwise equal")
PY
"$python" "$src/scripts/predict_numpy.py" "$ckpt" "$tmp/heat1d_test.h5" --compare "$tmp/pred1.h5" \
  --tolerance 1e-5
# A bad input file: exit status 2 and the file named.
if "$infer" "$ckpt" --input "$tmp/missing.h5" --output "$tmp/x.h5" 2>"$tmp/err"; then
  echo "FAIL: a missing input file was accepted"; exit 1
fi
grep -qF "$tmp/missing.h5: HDF5 data file not found" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "ok   inference"

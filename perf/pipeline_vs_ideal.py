#!/usr/bin/env python3
"""Pipeline throughput against the fill-drain ideal, from a strong-scaling study.

For each K > 1 and M, the ideal is K*M/(M+K-1) times the one-cell (K = 1)
throughput at the same M (the same micro-batch size): the GPipe bubble
formula. Prints samples/s, ideal, and measured/ideal; flags the issue's
target (>= 0.90 at M = 4 and 8).

    perf/pipeline_vs_ideal.py runs/pipeline-ideal
(run perf/pipeline_vs_ideal.sh to make the study and print this table).
"""
import argparse
import glob
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", help="folder of K{k}_M{m}.json run summaries (scripts/scaling_study.sh strong)")
    args = parser.parse_args()
    runs = {}
    for path in glob.glob(os.path.join(args.study, "K*_M*.json")):
        with open(path) as f:
            s = json.load(f)
        try:
            runs[(s["ranks"], s["micro_batches"])] = s["samples_per_second"]
        except KeyError as e:
            sys.exit(f"{path}: missing key {e}")
    if not runs:
        sys.exit(f"{args.study}: no K*_M*.json run summaries")
    print(f"{'K':>3} {'M':>4} {'samples/s':>10} {'ideal':>10} {'of ideal':>9}  target")
    ok = True
    for (k, m) in sorted(runs):
        if k == 1:
            continue
        base = runs.get((1, m))
        if base is None:
            print(f"{k:>3} {m:>4} {runs[(k, m)]:>10.1f}  (no K=1 run at M={m})")
            continue
        ideal = k * m / (m + k - 1) * base
        ratio = runs[(k, m)] / ideal
        target = ""
        if m in (4, 8):
            target = "met (>= 0.90)" if ratio >= 0.90 else "MISSED (< 0.90)"
            ok &= ratio >= 0.90
        print(f"{k:>3} {m:>4} {runs[(k, m)]:>10.1f} {ideal:>10.1f} {ratio:>9.3f}  {target}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

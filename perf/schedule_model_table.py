#!/usr/bin/env python3
"""gpipe-plan's predicted idle fraction of every schedule on the balanced
emulated deck (inputs/emulated_balanced.yaml's layers: F = BI = BW per sample,
equal parameters) against each schedule's formula, for K = 4, 8, 16 and
M = 2K, 4K. Predicted, not measured (gpipe-plan --json; no MPI, no data).

usage: perf/schedule_model_table.py [BUILD_DIR]   (default: build)

The deck is inputs/emulated_balanced.yaml with its 16 layers split into 32
of half the time each (2K = 32 stages at K = 16 for zb_v and dualpipe_v),
N = 16 M samples (16 rows per micro-batch), the shm network preset.
Formulas: fill_drain, 1f1b (K-1)/(M+K-1); zero_bubble (K-1)/(3M+K-1);
zb_v, dualpipe_v (K-1)/(6M+K-1) (docs/design.md, "Schedules").
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
PLAN = os.path.join(BUILD, "apps", "gpipe-plan")
SCHEDULES = ["fill_drain", "1f1b", "zero_bubble", "zb_v", "dualpipe_v"]


def formula(kind, K, M):
    work = {"fill_drain": M, "1f1b": M, "zero_bubble": 3 * M}.get(kind, 6 * M)
    return (K - 1) / (work + K - 1)


def deck_text():
    text = open(os.path.join(ROOT, "inputs", "emulated_balanced.yaml")).read()
    layer = re.compile(r"^(\s*- \{type: synthetic.*forward_us: )(\d+)(, backward_input_us: )(\d+)"
                       r"(, backward_weights_us: )(\d+)(.*)$", re.M)
    def halve(m):
        line = f"{m.group(1)}{int(m.group(2)) / 2:g}{m.group(3)}{int(m.group(4)) / 2:g}" \
               f"{m.group(5)}{int(m.group(6)) / 2:g}{m.group(7)}"
        return line + "\n" + line
    out, n = layer.subn(halve, text)
    assert n == 16, n
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        deck = os.path.join(tmp, "emulated_32.yaml")
        open(deck, "w").write(deck_text())
        print("| K | M | schedule | predicted idle | formula | predicted / formula | step ms |")
        print("|---|---|---|---|---|---|---|")
        for K in (4, 8, 16):
            for M in (2 * K, 4 * K):
                for kind in SCHEDULES:
                    cmd = [PLAN, deck, "--ranks", str(K), "--json", "--set", f"pipeline.schedule={kind}",
                           "--set", f"training.micro_batches={M}", "--set", f"training.batch_size={16 * M}"]
                    p = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                    f = formula(kind, K, M)
                    print(f"| {K} | {M} | {kind} | {p['bubble_fraction']:.4f} | {f:.4f} | "
                          f"{p['bubble_fraction'] / f:.3f} | {p['step_time_s'] * 1e3:.3f} |")


if __name__ == "__main__":
    main()

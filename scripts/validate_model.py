#!/usr/bin/env python3
"""The validation table of the performance model (scripts/validate_model.sh).

usage: scripts/validate_model.py OUT [--bound-emulated 0.05] [--bound-real 0.10]

Reads every OUT/<part>_<deck>_K<k>_M<m>_<schedule>.json run summary with its
trace (.h5) and its prediction (.plan.json, gpipe-plan --json), writes
OUT/validation.csv and prints how many points are within their bound and
every point outside it.

Measured, from the trace (every step traced): a rank's step time is the time
from one step's start to the next step's start (so it includes what runs
between steps: the optimizer, the step-end collectives, batch staging), its
median over the steps after the first (the warm-up); the step time is the
median over ranks (they agree within a few microseconds: steps are
synchronous). The idle fraction is 1 - (mean over ranks of the median
compute time per step) / step time: the share of the step a cell spends
neither computing nor in the optimizer, which is what the model's
bubble_fraction predicts. The summary's bubble_fraction_measured counts only
the waits for boundary messages (time blocked in the step-end collectives is
"other" in the trace), so it is printed beside it, not compared.
"""
import argparse
import csv
import glob
import json
import os
import re
import statistics
import sys

import h5py

NAME = re.compile(r"(emulated|imbalance|real)_(.+)_K(\d+)_M(\d+)_(fill_drain|1f1b|zero_bubble)\.json")


def measure(trace):
    """(step seconds, [compute seconds per step of each rank]) from a trace with every step traced."""
    periods, busy = [], []
    with h5py.File(trace, "r") as f:
        for name in sorted(k for k in f if k.startswith("rank_")):
            steps = sorted(f[name]["steps"][()], key=lambda r: int(r["step"]))
            starts = [float(r["start"]) for r in steps]
            gaps = [b - a for a, b in zip(starts, starts[1:])][1:]  # without the warm-up step
            if not gaps:
                raise ValueError(f"{trace}: {name} has {len(steps)} traced steps; need 3 or more")
            periods.append(statistics.median(gaps))
            busy.append(statistics.median(float(r["compute_time"]) for r in steps[1:]))
    return statistics.median(periods), busy


def load(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        match = NAME.fullmatch(os.path.basename(path))
        if not match or path.endswith(".plan.json"):
            continue
        base = path[:-5]
        part, deck, k, m, schedule = match.group(1), match.group(2), int(match.group(3)), int(match.group(4)), match.group(5)
        row = {"part": part, "deck": deck, "cells": k, "micro_batches": m, "schedule": schedule}
        try:
            summary = json.load(open(path))
            plan = json.load(open(base + ".plan.json"))
            step, busy_per_rank = measure(base + ".h5")
        except (OSError, ValueError, KeyError) as e:
            print(f"validate_model.py: {base}: skipped ({e})", file=sys.stderr)
            continue
        n = summary["batch_size"]
        busy = statistics.mean(busy_per_rank)
        row.update({
            "batch_size": n,
            "imbalance": plan.get("imbalance"),
            "measured_step_s": step,
            "predicted_step_s": plan["step_time_s"],
            "measured_samples_per_s": n / step,
            "predicted_samples_per_s": plan["samples_per_s"],
            "measured_idle": 1.0 - busy / step,
            "predicted_idle": plan["bubble_fraction"],
            "gpipe_idle_waits": summary.get("bubble_fraction_measured"),
            "analytical_bubble": (k - 1) / (m + k - 1),
            "measured_busy_s": max(busy_per_rank),  # the busiest cell, as predicted_busy_s
            "predicted_busy_s": max(c["busy_s"] for c in plan["cells"]),
            "load_start": (summary.get("machine_load") or {}).get("start"),
        })
        if part == "real":
            row["error"] = row["predicted_samples_per_s"] / row["measured_samples_per_s"] - 1.0
        else:
            row["error"] = row["predicted_step_s"] / row["measured_step_s"] - 1.0
        rows.append(row)
    return rows


COLUMNS = ["part", "deck", "cells", "micro_batches", "schedule", "batch_size", "imbalance",
           "measured_step_s", "predicted_step_s", "measured_samples_per_s", "predicted_samples_per_s",
           "error", "bound", "within", "measured_idle", "predicted_idle", "analytical_bubble",
           "gpipe_idle_waits", "measured_busy_s", "predicted_busy_s", "load_start"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--bound-emulated", type=float, default=0.05)
    ap.add_argument("--bound-real", type=float, default=0.10)
    a = ap.parse_args()
    rows = load(a.out)
    if not rows:
        sys.exit(f"validate_model.py: no <part>_<deck>_K<k>_M<m>_<schedule>.json runs with traces and plans in {a.out}")
    order = {"emulated": 0, "imbalance": 1, "real": 2}
    sched = {"fill_drain": 0, "1f1b": 1, "zero_bubble": 2}
    rows.sort(key=lambda r: (order[r["part"]], r["deck"], sched[r["schedule"]], r["cells"], r["micro_batches"]))
    for r in rows:
        r["bound"] = a.bound_real if r["part"] == "real" else a.bound_emulated
        r["within"] = abs(r["error"]) <= r["bound"]
    with open(os.path.join(a.out, "validation.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)

    def line(r):
        what = "samples/s" if r["part"] == "real" else "step"
        meas = r["measured_samples_per_s"] if r["part"] == "real" else r["measured_step_s"] * 1e3
        pred = r["predicted_samples_per_s"] if r["part"] == "real" else r["predicted_step_s"] * 1e3
        unit = "" if r["part"] == "real" else " ms"
        return (f"{r['part']:9} {r['deck']:24} K={r['cells']:<2} M={r['micro_batches']:<2} {r['schedule']:11} "
                f"{what} measured {meas:8.2f}{unit} predicted {pred:8.2f}{unit} ({r['error'] * 100:+5.1f} %); "
                f"idle measured {r['measured_idle']:.3f} predicted {r['predicted_idle']:.3f}")

    print(f"validation: {len(rows)} points; OUT/validation.csv = {os.path.join(a.out, 'validation.csv')}")
    for part in ("emulated", "imbalance", "real"):
        mine = [r for r in rows if r["part"] == part]
        if not mine:
            continue
        ok = sum(r["within"] for r in mine)
        errs = sorted(abs(r["error"]) for r in mine)
        print(f"{part}: {ok} of {len(mine)} within {mine[0]['bound'] * 100:g} % "
              f"(median |error| {statistics.median(errs) * 100:.1f} %, worst {errs[-1] * 100:.1f} %)")
    outside = [r for r in rows if not r["within"]]
    if outside:
        print("\noutside their bound:")
        for r in outside:
            print("  " + line(r))
    loads = [r["load_start"] for r in rows if r["load_start"] is not None]
    if loads:
        print(f"\nmachine load at the runs' start: {min(loads):.2f} .. {max(loads):.2f}")


if __name__ == "__main__":
    main()

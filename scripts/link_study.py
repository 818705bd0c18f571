#!/usr/bin/env python3
"""Analyse a link study (scripts/link_study.sh): OUT/link_study.csv,
OUT/crossover.csv, OUT/link_study.png, and the tables on stdout.

usage: scripts/link_study.py OUT [--threshold 0.9] [--no-plot]

Reads every OUT/*.json run summary with its trace (the .h5 of the same name).
Throughput: the global mini-batch over the median step time, a step's time
being the slowest rank's (max end - min start over ranks), without the first
traced step (the warm-up). A point is marked cpu_bound (its timing depends on
the CPU and so on the machine's load; re-run it on a quiet machine) when less
than half of its step time is spent waiting for the emulated link.

Crossover, per deck and M, at the smallest latency of the study: the bandwidth
at which throughput falls to `threshold` x compute-only, interpolated in
log(bandwidth) between the two points around it. Predicted: bytes per
micro-batch / forward time per micro-batch (the sender produces a message
every forward; the wire keeps up when it carries one per forward time),
both measured in the compute-only run (slowest cell).
"""
import argparse
import csv
import glob
import json
import math
import os
import statistics
import sys

import h5py

FORWARD, SEND = 0, 3


def step_times(trace):
    """Median slowest-rank step time (s) without the first traced step, and per-rank event tables."""
    starts, ends, events = {}, {}, []
    with h5py.File(trace, "r") as f:
        for name in sorted(k for k in f if k.startswith("rank_")):
            steps = f[name]["steps"][()]
            for row in steps:
                s = int(row["step"])
                starts[s] = min(starts.get(s, math.inf), float(row["start"]))
                ends[s] = max(ends.get(s, -math.inf), float(row["end"]))
            events.append(f[name]["events"][()])
    order = sorted(starts)
    measured = order[1:] if len(order) > 1 else order
    return statistics.median(ends[s] - starts[s] for s in measured), events, order[0]


def message_and_forward(events, first_step):
    """Mean bytes of rank 0's forward messages, and the slowest cell's mean forward time."""
    sent = [int(e["bytes"]) for e in events[0]
            if int(e["kind"]) == SEND and int(e["step"]) != first_step]
    forward = []
    for rank in events:
        times = [float(e["end"]) - float(e["start"]) for e in rank
                 if int(e["kind"]) == FORWARD and int(e["step"]) != first_step]
        if times:
            forward.append(statistics.mean(times))
    return (statistics.mean(sent) if sent else 0.0), (max(forward) if forward else 0.0)


def load_runs(out):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        trace = path[:-5] + ".h5"
        if not os.path.exists(trace):
            continue
        s = json.load(open(path))
        step, events, first = step_times(trace)
        link = s.get("link")
        comm = (s.get("communication") or {}).get("link") or {}
        run = {
            "deck": os.path.basename(s["deck"]).rsplit(".", 1)[0],
            "micro_batches": s["micro_batches"],
            "bandwidth_gbps": link["bandwidth_gbps"] if link else None,
            "latency_us": link["latency_us"] if link else None,
            "batch_size": s["batch_size"],
            "step_seconds": step,
            "samples_per_second": s["batch_size"] / step,
            "idle_fraction": s.get("bubble_fraction_measured"),
            "overlap_fraction": comm.get("overlap_fraction") if link else None,
            "wire_seconds_per_step": comm.get("wire_seconds_per_step") if link else None,
            "link_wait_seconds_per_step": comm.get("link_wait_seconds_per_step") if link else None,
            "load_start": (s.get("machine_load") or {}).get("start"),
        }
        if not link:
            run["bytes_per_micro_batch"], run["forward_seconds"] = message_and_forward(events, first)
        runs.append(run)
    return runs


def crossover(points, threshold):
    """points: [(bandwidth, relative throughput)]; the bandwidth where relative = threshold."""
    points = sorted(points)
    if not points:
        return None, "no points"
    if points[0][1] >= threshold:
        return None, f"< {points[0][0]:g} (hidden at every bandwidth of the study)"
    if points[-1][1] < threshold:
        return None, f"> {points[-1][0]:g} (exposed at every bandwidth of the study)"
    for (b0, r0), (b1, r1) in zip(points, points[1:]):
        if r0 < threshold <= r1:
            t = (threshold - r0) / (r1 - r0) if r1 > r0 else 1.0
            b = math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
            return b, f"{b:.3g}"
    return None, "not monotone"


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()
    runs = load_runs(a.out)
    if not runs:
        sys.exit(f"link_study.py: no summaries with traces in {a.out}")
    base = {(r["deck"], r["micro_batches"]): r for r in runs if r["bandwidth_gbps"] is None}
    linked = [r for r in runs if r["bandwidth_gbps"] is not None]
    for r in linked:
        b = base.get((r["deck"], r["micro_batches"]))
        r["compute_only_samples_per_second"] = b["samples_per_second"] if b else None
        r["relative"] = r["samples_per_second"] / b["samples_per_second"] if b else None
        wait = r["link_wait_seconds_per_step"] or 0.0
        r["cpu_bound"] = wait < 0.5 * r["step_seconds"]
    for r in base.values():
        r.update(compute_only_samples_per_second=r["samples_per_second"], relative=1.0, cpu_bound=True)

    cols = ["deck", "micro_batches", "bandwidth_gbps", "latency_us", "samples_per_second",
            "compute_only_samples_per_second", "relative", "idle_fraction", "overlap_fraction",
            "wire_seconds_per_step", "link_wait_seconds_per_step", "step_seconds", "cpu_bound",
            "load_start"]
    table = sorted(runs, key=lambda r: (r["deck"], r["micro_batches"], r["bandwidth_gbps"] or math.inf,
                                        r["latency_us"] or 0))
    with open(os.path.join(a.out, "link_study.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in table:
            w.writerow(r)
    print(f"{'deck':18} {'M':>3} {'Gb/s':>6} {'us':>5} {'samples/s':>10} {'rel':>5} {'idle':>5} "
          f"{'overlap':>7} {'wire s':>8} {'wait s':>8}  note")
    for r in table:
        bw = "-" if r["bandwidth_gbps"] is None else f"{r['bandwidth_gbps']:g}"
        lat = "-" if r["latency_us"] is None else f"{r['latency_us']:g}"
        note = "compute-only" if r["bandwidth_gbps"] is None else ("cpu-bound" if r["cpu_bound"] else "")
        print(f"{r['deck']:18} {r['micro_batches']:>3} {bw:>6} {lat:>5} {r['samples_per_second']:>10.1f} "
              f"{fmt(r['relative'], '.2f'):>5} {fmt(r['idle_fraction'], '.2f'):>5} "
              f"{fmt(r['overlap_fraction'], '.2f'):>7} {fmt(r['wire_seconds_per_step'], '.4f'):>8} "
              f"{fmt(r['link_wait_seconds_per_step'], '.4f'):>8}  {note}")

    rows = []
    for (deck, m), b in sorted(base.items()):
        mine = [r for r in linked if r["deck"] == deck and r["micro_batches"] == m]
        if not mine:
            continue
        lat = min(r["latency_us"] for r in mine)
        bw, text = crossover([(r["bandwidth_gbps"], r["relative"]) for r in mine if r["latency_us"] == lat],
                             a.threshold)
        predicted = (b["bytes_per_micro_batch"] / b["forward_seconds"] * 8 / 1e9
                     if b["forward_seconds"] > 0 else None)
        rows.append({"deck": deck, "micro_batches": m, "latency_us": lat,
                     "measured_crossover_gbps": bw, "measured": text,
                     "bytes_per_micro_batch": b["bytes_per_micro_batch"],
                     "forward_seconds_per_micro_batch": b["forward_seconds"],
                     "predicted_crossover_gbps": predicted})
    with open(os.path.join(a.out, "crossover.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["deck"])
        w.writeheader()
        for r in rows:
            w.writerow(r)
    print(f"\ncrossover (throughput = {a.threshold:g} x compute-only), Gb/s:")
    print(f"{'deck':18} {'M':>3} {'lat us':>6} {'measured':>40} {'bytes/mb':>9} {'fwd ms/mb':>9} "
          f"{'predicted':>9}")
    for r in rows:
        print(f"{r['deck']:18} {r['micro_batches']:>3} {r['latency_us']:>6g} {r['measured']:>40} "
              f"{r['bytes_per_micro_batch']:>9.0f} {r['forward_seconds_per_micro_batch'] * 1e3:>9.3f} "
              f"{fmt(r['predicted_crossover_gbps'], '.3g'):>9}")

    if a.no_plot:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("link_study.py: no matplotlib: no plot", file=sys.stderr)
        return
    decks = sorted({r["deck"] for r in runs})
    fig, axes = plt.subplots(1, len(decks), figsize=(6.5 * len(decks), 4.8), squeeze=False)
    lats = sorted({r["latency_us"] for r in linked})
    styles = ["-", "--", ":", "-."]
    for ax, deck in zip(axes[0], decks):
        ms = sorted({r["micro_batches"] for r in runs if r["deck"] == deck})
        for i, m in enumerate(ms):
            color = f"C{i}"
            b = base.get((deck, m))
            if b:
                ax.axhline(b["samples_per_second"], color=color, lw=0.8, ls=(0, (1, 3)))
            for j, lat in enumerate(lats):
                pts = sorted((r["bandwidth_gbps"], r["samples_per_second"], r["cpu_bound"]) for r in linked
                             if r["deck"] == deck and r["micro_batches"] == m and r["latency_us"] == lat)
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[j % len(styles)], color=color,
                        marker="o", ms=3, label=f"M={m}, {lat:g} us")
            row = next((r for r in rows if r["deck"] == deck and r["micro_batches"] == m), None)
            if b and row and row["predicted_crossover_gbps"]:
                ax.plot([row["predicted_crossover_gbps"]], [b["samples_per_second"]], "x", color=color, ms=9)
        ax.set_xscale("log")
        ax.set_xlabel("link bandwidth (Gb/s)")
        ax.set_ylabel("samples/s")
        ax.set_title(f"{deck}, K = 2 (dotted: compute-only; x: predicted crossover)", fontsize=9)
        ax.legend(fontsize=6, ncol=2)
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    path = os.path.join(a.out, "link_study.png")
    fig.savefig(path, dpi=110)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots of the performance model's validation (scripts/validate_model.sh).

usage: scripts/plot_model.py OUT

Reads OUT/validation.csv (scripts/validate_model.py) and writes
  OUT/validation.png  left: predicted against measured step time of every
                      emulated point (K by colour, schedule by marker; the
                      diagonal and +-5 %); right: measured idle fraction of
                      the fill_drain points against GPipe's bubble
                      (K-1)/(M+K-1), with the model's prediction
  OUT/imbalance.png   the imbalance study (K = 4): samples/s and idle fraction
                      against max/mean cell time, measured (points) and
                      predicted (lines), one colour per M
"""
import csv
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_model.py: needs matplotlib")

MARKERS = {"fill_drain": "o", "1f1b": "s", "zero_bubble": "^"}


def read(out):
    with open(os.path.join(out, "validation.csv")) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("cells", "micro_batches", "batch_size"):
            r[k] = int(r[k])
        for k in ("measured_step_s", "predicted_step_s", "measured_samples_per_s", "predicted_samples_per_s",
                  "measured_idle", "predicted_idle", "analytical_bubble", "error"):
            r[k] = float(r[k])
        r["imbalance"] = float(r["imbalance"]) if r["imbalance"] else None
    return rows


def validation(rows, out):
    emu = [r for r in rows if r["part"] == "emulated"]
    if not emu:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5))
    ks = sorted({r["cells"] for r in emu})
    colours = plt.cm.viridis([i / max(1, len(ks) - 1) for i in range(len(ks))])
    for k, c in zip(ks, colours):
        for s, marker in MARKERS.items():
            pts = [r for r in emu if r["cells"] == k and r["schedule"] == s]
            if pts:
                a.scatter([r["measured_step_s"] * 1e3 for r in pts], [r["predicted_step_s"] * 1e3 for r in pts],
                          color=c, marker=marker, s=22, label=f"K={k} {s}")
    lo = min(min(r["measured_step_s"], r["predicted_step_s"]) for r in emu) * 1e3 * 0.9
    hi = max(max(r["measured_step_s"], r["predicted_step_s"]) for r in emu) * 1e3 * 1.1
    a.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    a.plot([lo, hi], [lo * 1.05, hi * 1.05], "k:", lw=0.8)
    a.plot([lo, hi], [lo * 0.95, hi * 0.95], "k:", lw=0.8)
    a.set_xscale("log"); a.set_yscale("log")
    a.set_xlabel("measured step time (ms)"); a.set_ylabel("predicted step time (ms, gpipe-plan)")
    a.set_title("emulated pipelines: predicted vs measured (dotted: +-5 %)")
    a.legend(fontsize=6, ncol=2)
    fd = [r for r in emu if r["schedule"] == "fill_drain"]
    for k, c in zip(ks, colours):
        pts = sorted((r for r in fd if r["cells"] == k), key=lambda r: r["analytical_bubble"])
        if pts:
            b.scatter([r["analytical_bubble"] for r in pts], [r["measured_idle"] for r in pts], color=c, s=22,
                      label=f"K={k} measured")
            b.plot([r["analytical_bubble"] for r in pts], [r["predicted_idle"] for r in pts], color=c, lw=0.8)
    b.plot([0, 1], [0, 1], "k-", lw=0.8)
    b.set_xlabel("GPipe bubble (K-1)/(M+K-1)"); b.set_ylabel("idle fraction")
    b.set_title("fill_drain: measured idle (points), predicted (lines)")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "validation.png"), dpi=120)
    print(f"wrote {os.path.join(out, 'validation.png')}")


def imbalance(rows, out):
    imb = [r for r in rows if r["part"] == "imbalance" and r["imbalance"] is not None]
    if not imb:
        return
    schedules = [s for s in MARKERS if any(r["schedule"] == s for r in imb)]
    fig, axes = plt.subplots(len(schedules), 2, figsize=(12, 4.5 * len(schedules)), squeeze=False)
    ms = sorted({r["micro_batches"] for r in imb})
    colours = plt.cm.plasma([i / max(1, len(ms)) for i in range(len(ms))])
    for (a, b), s in zip(axes, schedules):
        for m, c in zip(ms, colours):
            pts = sorted((r for r in imb if r["micro_batches"] == m and r["schedule"] == s),
                         key=lambda r: r["imbalance"])
            if not pts:
                continue
            x = [r["imbalance"] for r in pts]
            a.plot(x, [r["predicted_samples_per_s"] for r in pts], color=c, lw=1)
            a.scatter(x, [r["measured_samples_per_s"] for r in pts], color=c, s=22, label=f"M={m}")
            b.plot(x, [r["predicted_idle"] for r in pts], color=c, lw=1)
            b.scatter(x, [r["measured_idle"] for r in pts], color=c, s=22, label=f"M={m}")
        k = imb[0]["cells"]
        a.set_xlabel("max/mean cell time"); a.set_ylabel("samples/s")
        a.set_title(f"{s}, K={k}: throughput (points measured, lines predicted)")
        b.set_xlabel("max/mean cell time"); b.set_ylabel("idle fraction")
        b.set_title(f"{s}, K={k}: idle fraction")
        a.legend(fontsize=7); b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "imbalance.png"), dpi=120)
    print(f"wrote {os.path.join(out, 'imbalance.png')}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = read(sys.argv[1])
    validation(rows, sys.argv[1])
    imbalance(rows, sys.argv[1])


if __name__ == "__main__":
    main()

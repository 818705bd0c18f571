#!/usr/bin/env python3
"""Gantt chart of one sampled training step of a gpipe-train trace (GPipe paper, Fig. 2c).

usage: scripts/plot_timeline.py TRACE.h5 [--step S] [-o timeline.png] [--list]

One row per rank (rank 0 on top). Forward (F), backward (B), recompute (R),
the split backward of the zero_bubble schedule (I: its B op, the input
gradient; W: the weight gradient) and optimizer (opt) boxes are colored by
kind, named in the legend and labeled with the
micro-batch index where they are wide enough. Under fill_drain and 1f1b
one W box per rank follows its last backward: the weight gradients of the
dense layers for the whole mini-batch (all M micro-batches stacked, one GEMM
per layer; their B boxes then compute input gradients and the other layers'
weight gradients), labelled "W all M" and explained in the legend; sends are thin black marks at
the top of a row, receives thin marks at the bottom; explicit waits are grey
cross-hatched, and any other time inside the rank's step is hatched as idle.
The title gives K, M and the bubble: measured (the run's mean over ranks and
sampled steps of idle_time/step_time, and this step's) against the
schedule's analytical bubble ((K-1)/(M+K-1) for fill_drain and 1f1b,
(K-1)/(3M+K-1) for zero_bubble). Default step: the last one sampled on every rank. The trace
layout is described in docs/scaling-studies.md.
"""
import argparse
import os
import sys

PROG = "plot_timeline.py"
try:
    import h5py
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError as e:
    sys.exit(f"{PROG}: {e}; needs numpy, h5py and matplotlib (Debian: python3-h5py "
             "python3-matplotlib; if python3 is another interpreter, run /usr/bin/python3 " + sys.argv[0] + ")")

DEFAULT_KINDS = {"forward": 0, "backward": 1, "recompute": 2, "send": 3, "receive": 4, "wait": 5,
                 "optimizer": 6, "allreduce": 7, "reduce_wait": 8, "backward_input": 9,
                 "backward_weights": 10, "wire": 11, "link_wait": 12}
EVENT_FIELDS = ("step", "kind", "micro_batch", "start", "end")
STEP_FIELDS = ("step", "start", "end", "step_time", "idle_time")
BOXES = {  # kind: (color, label prefix)
    "forward": ("#4C72B0", "F"), "backward": ("#DD8452", "B"),
    "backward_input": ("#DA8BC3", "I"), "backward_weights": ("#937860", "W"),
    "recompute": ("#8172B3", "R"), "optimizer": ("#55A868", "opt")}
LEGEND = {"forward": "forward (F)", "backward": "backward (B, fused)",
          "backward_input": "input gradient (I = B of split)", "backward_weights": "weight gradient (W)",
          "recompute": "recompute (R)", "optimizer": "optimizer"}


def analytical_bubble(schedule, K, M):
    """The schedule's idle fraction with balanced cells (equal F, B, W times for zero_bubble)."""
    return (K - 1) / ((3 * M if schedule == "zero_bubble" else M) + K - 1)


def die(msg):
    sys.exit(f"{PROG}: error: {msg}")


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def overload_note(attrs):
    """'' or a note when the run record says the machine was loaded beyond its cores."""
    import json
    try:
        load = json.loads(text(attrs.get("run_record", "{}"))).get("machine_load") or {}
    except ValueError:
        return ""
    loads = [v for v in (load.get("start"), load.get("end")) if isinstance(v, (int, float))]
    cores = load.get("cores")
    if not loads or not cores or max(loads) <= cores:
        return ""
    return f"machine loaded beyond its cores: load {max(loads):.1f} > {cores} cores"


def read_dataset(f, path, name, fields):
    if name not in f:
        die(f"{path}: missing dataset /{name}")
    ds = f[name]
    if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None:
        die(f"{path}: /{name} is not a compound dataset")
    missing = [x for x in fields if x not in ds.dtype.names]
    if missing:
        die(f"{path}: /{name} lacks field(s) {', '.join(missing)} (has {', '.join(ds.dtype.names)})")
    return ds


def load(path):
    """Returns (attrs, kind names by value, [(events, steps)] per rank) as numpy arrays."""
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        die(f"{path}: not a readable HDF5 file ({e})")
    with f:
        for key in ("ranks", "micro_batches"):
            if key not in f.attrs:
                die(f"{path}: missing root attribute '{key}'")
        attrs = {k: (text(v) if isinstance(v, (str, bytes)) else v) for k, v in f.attrs.items()}
        K = int(attrs["ranks"])
        ranks, kinds = [], None
        for r in range(K):
            ev = read_dataset(f, path, f"rank_{r:04d}/events", EVENT_FIELDS)
            st = read_dataset(f, path, f"rank_{r:04d}/steps", STEP_FIELDS)
            if kinds is None:
                mapping = h5py.check_enum_dtype(ev.dtype.fields["kind"][0]) or DEFAULT_KINDS
                kinds = {int(v): k for k, v in mapping.items()}
            ranks.append((ev[()], st[()]))
    return attrs, kinds, ranks


def main():
    doc = "\n\n".join(x for x in __doc__.split("\n\n") if not x.startswith("usage:"))
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="TRACE.h5")
    p.add_argument("--step", type=int, help="sampled step to draw (default: the last sampled)")
    p.add_argument("-o", "--output", help="PNG to write (default: TRACE_step<S>.png next to TRACE)")
    p.add_argument("--list", action="store_true", help="print the sampled steps and exit")
    a = p.parse_args()

    attrs, kinds, ranks = load(a.trace)
    K, M = int(attrs["ranks"]), int(attrs["micro_batches"])
    sampled = sorted(set.intersection(*(set(int(s) for s in st["step"]) for _, st in ranks)))
    if not sampled:
        die(f"{a.trace}: no step is sampled on every rank (are the /rank_*/steps datasets empty?)")
    if a.list:
        print(" ".join(map(str, sampled)))
        return
    S = sampled[-1] if a.step is None else a.step
    if S not in sampled:
        die(f"{a.trace}: step {S} is not sampled on every rank; sampled: "
            + " ".join(map(str, sampled[:20])) + (" ..." if len(sampled) > 20 else ""))

    rows = [(ev[ev["step"] == S], st[st["step"] == S][0]) for ev, st in ranks]
    t0 = min(float(st["start"]) for _, st in rows)
    span = max(float(st["end"]) for _, st in rows) - t0
    ms = lambda t: (np.asarray(t, dtype=float) - t0) * 1e3
    width_ms = span * 1e3

    schedule = str(attrs.get("schedule", "fill_drain"))
    batched_w = schedule != "zero_bubble"  # one W box of the whole mini-batch per rank
    fig, ax = plt.subplots(figsize=(13, 2.2 + 0.55 * K))
    for r, (ev, st) in enumerate(rows):
        # the rank's step window, hatched: whatever no event covers is idle
        ax.broken_barh([(ms(st["start"]), (st["end"] - st["start"]) * 1e3)], (r - 0.3, 0.6),
                       facecolor="white", edgecolor="#bbbbbb", hatch="///", linewidth=0.5)
        for e in ev:
            kind = kinds.get(int(e["kind"]), "unknown")
            x, w = float(ms(e["start"])), float(e["end"] - e["start"]) * 1e3
            if kind in BOXES:
                color, prefix = BOXES[kind]
                ax.broken_barh([(x, w)], (r - 0.3, 0.6), facecolor=color, edgecolor="black",
                               linewidth=0.4)
                m = int(e["micro_batch"])
                labels = [prefix] if m < 0 else [f"{prefix}{m}", str(m)]
                if kind == "backward_weights" and batched_w:
                    labels = [f"W all {M}", "W"]
                for label in labels:
                    if w > width_ms * 0.0045 * (len(label) + 1):  # about the text's width
                        ax.text(x + w / 2, r, label, ha="center", va="center", fontsize=7,
                                color="white", clip_on=True)
                        break
            elif kind == "wait":
                ax.broken_barh([(x, w)], (r - 0.3, 0.6), facecolor="#dddddd", edgecolor="#888888",
                               hatch="xx", linewidth=0.4)
            elif kind == "link_wait":  # emulated link: holding for a modelled arrival
                ax.broken_barh([(x, w)], (r - 0.3, 0.6), facecolor="#f2c94c", edgecolor="#888888",
                               hatch="..", linewidth=0.4)
            elif kind == "wire":  # emulated link: a message to this rank on the wire (thin line)
                ax.broken_barh([(x, max(w, width_ms * 1e-3))], (r + 0.2, 0.06), facecolor="#2ca02c",
                               edgecolor="#2ca02c", linewidth=0.5)
            elif kind in ("send", "receive"):
                y = r - 0.42 if kind == "send" else r + 0.32
                color = "black" if kind == "send" else "#C44E52"
                ax.broken_barh([(x, max(w, width_ms * 1e-3))], (y, 0.1), facecolor=color,
                               edgecolor=color, linewidth=0.5)

    step_bubble = float(np.mean([st["idle_time"] / st["step_time"] for _, st in rows]))
    analytical = float(attrs.get("bubble_fraction_analytical",
                                 analytical_bubble(attrs.get("schedule", "fill_drain"), K, M)))
    run_bubble = attrs.get("bubble_fraction_measured")
    measured = (f"run {float(run_bubble):.3f}, this step {step_bubble:.3f}" if run_bubble is not None
                else f"this step {step_bubble:.3f}")
    title_deck = os.path.basename(text(attrs["deck"])) if "deck" in attrs else ""
    note = overload_note(attrs)
    ax.set_title(f"{os.path.basename(a.trace)}" + (f" ({title_deck})" if title_deck else "")
                 + f", step {S}: K = {K} ranks, M = {M} micro-batches"
                 + (f", N = {int(attrs['batch_size'])}" if "batch_size" in attrs else "")
                 + (f", {attrs['schedule']}" if "schedule" in attrs else "")
                 + (f", remat {attrs['remat']}" if "remat" in attrs else "")
                 + f"\nbubble measured {measured}; analytical {analytical:.3f}"
                 + (f"\n{note}: timings not representative" if note else ""),
                 fontsize=10, color="#b00000" if note else "black")
    ax.set_yticks(range(K), [f"rank {r}" for r in range(K)])
    ax.set_ylim(K - 0.5, -0.5)
    ax.set_xlim(0, width_ms * 1.01)
    ax.set_xlabel("time since the step's first start (ms)")
    present = {kinds.get(int(k)) for ev, _ in rows for k in np.unique(ev["kind"])}
    legend = dict(LEGEND)
    if batched_w:
        legend["backward"] = "backward (B: input gradients; dense weight gradients in W)"
        legend["backward_weights"] = (f"W: dense weight gradients of all M = {M} micro-batches, one GEMM "
                                      "per layer after the last B")
    handles = [Patch(facecolor=c, edgecolor="black", label=legend[k]) for k, (c, _) in BOXES.items()
               if k in present]
    extra = {"send": Patch(facecolor="black", label="send (top)"),
             "receive": Patch(facecolor="#C44E52", label="receive (bottom)"),
             "wait": Patch(facecolor="#dddddd", edgecolor="#888888", hatch="xx", label="wait"),
             "link_wait": Patch(facecolor="#f2c94c", edgecolor="#888888", hatch="..", label="link wait"),
             "wire": Patch(facecolor="#2ca02c", label="on the wire (emulated)")}
    handles += [h for k, h in extra.items() if k in present]
    handles.append(Patch(facecolor="white", edgecolor="#bbbbbb", hatch="///", label="idle"))
    height = fig.get_size_inches()[1]
    columns = 3 if batched_w and "backward_weights" in present else 6
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), columns), fontsize=8,
               frameon=False)
    legend_rows = (len(handles) + columns - 1) // columns
    fig.tight_layout(rect=(0, (0.2 + 0.2 * legend_rows) / height, 1, 1))
    out = a.output or os.path.splitext(a.trace)[0] + f"_step{S}.png"
    fig.savefig(out, dpi=130)

    print(f"{a.trace}: step {S}, {len(sampled)} sampled steps; K={K} M={M}")
    print(f"{'rank':>4} {'step ms':>9} {'compute':>9} {'comm':>9} {'idle':>9} {'idle frac':>9}")
    for r, (_, st) in enumerate(rows):
        get = lambda k: float(st[k]) * 1e3 if k in st.dtype.names else float("nan")
        print(f"{r:>4} {get('step_time'):9.2f} {get('compute_time'):9.2f} {get('comm_time'):9.2f} "
              f"{get('idle_time'):9.2f} {st['idle_time'] / st['step_time']:9.3f}")
    print(f"bubble: measured {measured}; analytical {analytical:.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

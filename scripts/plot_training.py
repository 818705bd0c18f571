#!/usr/bin/env python3
"""Training curves from gpipe-train run summaries or metrics streams: loss
(train and test, log axis) and test accuracy (classification) or test RMSE
(regression, the targets' units) per epoch, one colour per run.

usage: scripts/plot_training.py RUN.json|RUN.jsonl [MORE ...] [-o curves.png]

RUN.json is a summary (gpipe-train --summary): its "history" holds every
epoch of the run, earlier jobs' included after a restart. RUN.jsonl is a
metrics stream (gpipe-train --metrics; docs/file-formats.md): its "epoch"
records give the same per-epoch figures and its "progress" records the
running training loss between them (a thin line), so a run can be plotted
while it goes (a partial last line is skipped). The title names the deck,
the ranks and their layout (D replicas x K cells), the schedule and M; a
run made on a machine loaded beyond its cores (1-minute load > logical
CPUs, from the summary's machine_load or the stream's start records) is
marked "overloaded": its timings are not representative. Prints each run's
history as a table.
"""
import argparse
import json
import math
import os
import re
import sys

PROG = "plot_training.py"


def die(msg):
    sys.exit(f"{PROG}: error: {msg}")


def check_history(path, history):
    for row in history:
        for key in ("epoch", "train_loss", "test_loss"):
            if key not in row:
                die(f"{path}: a history entry lacks '{key}'")
        if "test_accuracy" not in row and "test_rmse" not in row:
            die(f"{path}: a history entry lacks 'test_accuracy' (or 'test_rmse' for regression)")


def standardized_targets(effective_deck):
    """Whether the deck text standardizes the regression targets."""
    return bool(re.search(r"normalize_targets:\s*standardize", effective_deck or ""))


def read_summary(path, s):
    history = s.get("history") if isinstance(s, dict) else None
    if not isinstance(history, list):
        die(f"{path}: missing key 'history' (not a gpipe-train summary?)")
    check_history(path, history)
    load = s.get("machine_load") or {}
    run = s.get("run") or {}
    return {
        "history": history, "progress": [], "deck": s.get("deck", "?"), "ranks": s.get("ranks"),
        "replicas": s.get("replicas"), "cells": s.get("cells"), "schedule": s.get("schedule"),
        "micro_batches": s.get("micro_batches"), "loss": s.get("loss", "?"),
        "loads": [x for x in (load.get("start"), load.get("end")) if isinstance(x, (int, float))],
        "cores": load.get("cores"), "standardized": standardized_targets(run.get("effective_deck")),
        "jobs": 1 + (s.get("epochs_this_job", len(history)) < len(history)),
    }


def read_stream(path, text):
    """A metrics stream: the records of its last run id (a file may hold several runs)."""
    records = []
    for line in text.split("\n"):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a partial line of a running or killed job
        if isinstance(r, dict) and "event" in r:
            records.append(r)
    if not records:
        die(f"{path}: no metrics records (not a gpipe-train --metrics stream?)")
    run_id = records[-1].get("run_id")
    records = [r for r in records if r.get("run_id") == run_id]
    epochs = {}
    for r in records:
        if r["event"] == "epoch":
            epochs[r["epoch"]] = {k: v for k, v in r.items() if k not in ("event", "run_id", "time")}
    history = [epochs[e] for e in sorted(epochs)]
    check_history(path, history)
    starts = [r for r in records if r["event"] == "start"]
    first = starts[0] if starts else {}
    return {
        "history": history, "progress": [r for r in records if r["event"] == "progress"],
        "deck": first.get("deck", "?"), "ranks": first.get("ranks"), "replicas": first.get("replicas"),
        "cells": first.get("cells"), "schedule": first.get("schedule"),
        "micro_batches": first.get("micro_batches"), "loss": first.get("loss", "?"),
        "loads": [r["machine_load"] for r in starts if isinstance(r.get("machine_load"), (int, float))],
        "cores": first.get("cores"), "standardized": bool(first.get("standardized_targets")),
        "jobs": max(len(starts), 1),
    }


def read_run(path):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        die(f"{path}: no such file")
    except OSError as e:
        die(f"{path}: cannot read it ({e})")
    if path.endswith(".jsonl"):
        return read_stream(path, text)
    try:
        s = json.loads(text)
    except ValueError as e:
        die(f"{path}: not valid JSON ({e}); a metrics stream must be named *.jsonl")
    return read_summary(path, s)


def overloaded(run):
    """'' or a note when the run's machine was loaded beyond its cores."""
    cores, loads = run["cores"], run["loads"]
    if not cores or not loads or max(loads) <= cores:
        return ""
    return f"load {max(loads):.1f} > {cores} cores"


def layout(run):
    if run["ranks"] is None:
        return "ranks unknown"
    text = f"{run['ranks']} rank{'s' if run['ranks'] != 1 else ''}"
    if run["replicas"] is not None and run["cells"] is not None:
        text += f" (D={run['replicas']} x K={run['cells']})"
    if run["schedule"]:
        text += f", {run['schedule']}"
    if run["micro_batches"]:
        text += f", M={run['micro_batches']}"
    return text


def metric(history):
    """The per-epoch metric key of a run: test_accuracy, or test_rmse for regression."""
    return "test_accuracy" if "test_accuracy" in history[0] else "test_rmse"


def loss_label(runs):
    kinds = sorted({r["loss"] for r in runs})
    regression = [r for r in runs if r["loss"] != "softmax_cross_entropy"]
    label = "loss per sample (" + ", ".join(
        "cross-entropy, nats" if k == "softmax_cross_entropy" else k for k in kinds) + ")"
    if regression and all(r["standardized"] for r in regression):
        label += "\nof standardized targets (dimensionless)"
    elif regression:
        label += "\nin the targets' units squared (mse)"
    return label


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("runs", nargs="+", metavar="RUN.json|RUN.jsonl")
    p.add_argument("-o", "--output", help="PNG to write (default: the first file's name + .png)")
    a = p.parse_args()
    names = [os.path.basename(f) for f in a.runs]
    if len(set(names)) < len(names):  # e.g. several experiments' metrics.jsonl: add the folder
        names = [os.path.join(os.path.basename(os.path.dirname(os.path.abspath(f))), n)
                 for f, n in zip(a.runs, names)]
    runs = [(name, read_run(f)) for name, f in zip(names, a.runs)]
    for name, run in runs:
        note = overloaded(run)
        print(f"{name}: {run['deck']}, {layout(run)}" + (f" [overloaded: {note}]" if note else ""))
        history = run["history"]
        key = metric(history) if history else "test_accuracy"
        print(f"{'epoch':>5} {'train loss':>10} {'test loss':>10} "
              f"{'test acc' if key == 'test_accuracy' else 'test rmse':>9}")
        fmt = lambda v: f"{v:.4f}" if isinstance(v, (int, float)) else "n/a"
        for r in history:
            print(f"{r['epoch']:>5} {fmt(r['train_loss']):>10} {fmt(r['test_loss']):>10} "
                  f"{fmt(r.get(key)):>9}")
        if not history and run["progress"]:
            last = run["progress"][-1]
            print(f"  (no epoch complete yet; step {last['step']}, epoch {last['epoch']}, "
                  f"step {last['epoch_step']}/{last['epoch_steps']}, loss {fmt(last['loss'])})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        die(f"{e}; needs matplotlib (Debian: python3-matplotlib; or run /usr/bin/python3 {sys.argv[0]})")
    fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(12, 4.8))
    positive = True
    for i, (name, run) in enumerate(runs):
        color = f"C{i % 10}"
        history = run["history"]
        note = overloaded(run)
        label = name + (" (overloaded)" if note and len(runs) == 1 else "")
        epochs = [r["epoch"] for r in history]
        finite = lambda v: isinstance(v, (int, float)) and math.isfinite(v)
        train = [r["train_loss"] if finite(r["train_loss"]) else float("nan") for r in history]
        test = [r["test_loss"] if finite(r["test_loss"]) else float("nan") for r in history]
        positive &= all(v > 0 for v in train + test if finite(v))
        if run["progress"]:
            xs = [r["epoch"] - 1 + r["epoch_step"] / r["epoch_steps"] for r in run["progress"]]
            ys = [r["loss"] if finite(r["loss"]) else float("nan") for r in run["progress"]]
            positive &= all(v > 0 for v in ys if finite(v))
            ax_l.plot(xs, ys, "-", color=color, alpha=0.35, linewidth=1,
                      label=f"{label} train (running, within epochs)")
        ax_l.plot(epochs, train, "o-", color=color, label=f"{label} train (epoch mean)")
        ax_l.plot(epochs, test, "s--", color=color, label=f"{label} test")
        if history:
            ax_a.plot(epochs, [r.get(metric(history)) for r in history], "o-", color=color, label=label)
    if positive:
        ax_l.set_yscale("log")
    ax_l.set_ylabel(loss_label([r for _, r in runs]))
    keys = {metric(r["history"]) for _, r in runs if r["history"]}
    ax_a.set_ylabel(" / ".join(sorted("test accuracy (fraction correct)" if k == "test_accuracy"
                                      else "test RMSE (targets' units)" for k in keys))
                    or "test accuracy (fraction correct)")
    for ax in (ax_l, ax_a):
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    # Title: the deck, ranks and layout of each run; overloaded runs marked.
    lines = []
    for name, run in runs[:4]:
        note = overloaded(run)
        jobs = f", {run['jobs']} jobs" if run["jobs"] > 1 else ""
        lines.append((f"{name}: " if len(runs) > 1 else "")
                     + f"{os.path.basename(str(run['deck']))}, {layout(run)}{jobs}"
                     + (f"  [{note}]" if note else ""))
    if len(runs) > 4:
        lines.append(f"... and {len(runs) - 4} more runs")
    if any(overloaded(r) for _, r in runs):
        lines.append("[load > cores]: the machine was loaded beyond its cores; timings not representative")
    fig.suptitle("\n".join(lines), fontsize=9,
                 color="#b00000" if any(overloaded(r) for _, r in runs) else "black")
    fig.tight_layout()
    out = a.output or os.path.splitext(a.runs[0])[0] + ".png"
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

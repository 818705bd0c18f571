#!/usr/bin/env python3
"""Training curves from gpipe-train run summaries: loss (train and test) and
test accuracy (classification) or test RMSE (regression) per epoch, one
colour per summary.

usage: scripts/plot_training.py RUN.json [RUN2.json ...] [-o curves.png]

Reads the summaries' "history" (gpipe-train --summary; docs/file-formats.md)
and prints it as a table. Several summaries (e.g. the runs of a study, or a
run and its restart) are drawn on the same axes, labelled by file name.
"""
import argparse
import json
import os
import sys

PROG = "plot_training.py"


def die(msg):
    sys.exit(f"{PROG}: error: {msg}")


def read_history(path):
    try:
        with open(path) as f:
            s = json.load(f)
    except FileNotFoundError:
        die(f"{path}: no such file")
    except (OSError, ValueError) as e:
        die(f"{path}: not valid JSON ({e})")
    history = s.get("history") if isinstance(s, dict) else None
    if not isinstance(history, list):
        die(f"{path}: missing key 'history' (not a gpipe-train summary?)")
    for row in history:
        for key in ("epoch", "train_loss", "test_loss"):
            if key not in row:
                die(f"{path}: a history entry lacks '{key}'")
        if "test_accuracy" not in row and "test_rmse" not in row:
            die(f"{path}: a history entry lacks 'test_accuracy' (or 'test_rmse' for regression)")
    return history


def metric(history):
    """The per-epoch metric key of a run: test_accuracy, or test_rmse for regression."""
    return "test_accuracy" if "test_accuracy" in history[0] else "test_rmse"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("summaries", nargs="+", metavar="RUN.json")
    p.add_argument("-o", "--output", help="PNG to write (default: the first summary's name + .png)")
    a = p.parse_args()
    runs = [(os.path.basename(f), read_history(f)) for f in a.summaries]
    for name, history in runs:
        print(f"{name}")
        key = metric(history) if history else "test_accuracy"
        print(f"{'epoch':>5} {'train loss':>10} {'test loss':>10} "
              f"{'test acc' if key == 'test_accuracy' else 'test rmse':>9}")
        for r in history:
            print(f"{r['epoch']:>5} {r['train_loss']:>10.4f} {r['test_loss']:>10.4f} "
                  f"{r[key]:>9.4f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        die(f"{e}; needs matplotlib (Debian: python3-matplotlib; or run /usr/bin/python3 {sys.argv[0]})")
    fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (name, history) in enumerate(runs):
        color = f"C{i % 10}"
        epochs = [r["epoch"] for r in history]
        ax_l.plot(epochs, [r["train_loss"] for r in history], "o-", color=color, label=f"{name} train")
        ax_l.plot(epochs, [r["test_loss"] for r in history], "s--", color=color, label=f"{name} test")
        if history:
            ax_a.plot(epochs, [r[metric(history)] for r in history], "o-", color=color, label=name)
    ax_l.set_ylabel("loss (mean per sample)")
    keys = {metric(h) for _, h in runs if h}
    ax_a.set_ylabel(" / ".join(sorted("test accuracy" if k == "test_accuracy" else "test RMSE"
                                      for k in keys)) or "test accuracy")
    for ax in (ax_l, ax_a):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = a.output or os.path.splitext(a.summaries[0])[0] + ".png"
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The plots' readability fixes (issue 26), checked on the matplotlib figures:
plot_training.py (summaries and metrics streams: integer epoch ticks, log loss
axis, units, a title naming deck, ranks and layout, overloaded runs marked),
plot_timeline.py (fill-drain's batched W box explained in the legend and
labelled, an overloaded run marked) and plot_scaling.py (points on an
overloaded machine ringed and counted in the title).

usage: test_plots.py SOURCE_DIR   (run with an interpreter that has h5py and matplotlib)
"""
import importlib.util
import json
import os
import sys
import tempfile

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

root = os.path.abspath(sys.argv[1])
work = tempfile.mkdtemp(prefix="gpipe_plots_")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}")


def module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "scripts", name + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def run_main(name, *args):
    """Runs scripts/NAME.py's main with `args`; returns the figure it drew."""
    plt.close("all")
    m = module(name)
    argv = sys.argv
    sys.argv = [name + ".py", *args]
    try:
        m.main()
    finally:
        sys.argv = argv
    return plt.gcf()


history = [{"epoch": e, "train_loss": 1.0 / e, "test_loss": 0.8 / e, "test_rmse": 0.3 / e,
            "seconds": 1.0, "samples_per_second": 100.0} for e in range(1, 8)]
summary = {"deck": "inputs/heat1d_surrogate.yaml", "ranks": 2, "replicas": 1, "cells": 2,
           "schedule": "fill_drain", "micro_batches": 4, "loss": "mse", "history": history,
           "machine_load": {"start": 12.7, "end": 3.0, "cores": 2}, "epochs_this_job": 7,
           "run": {"effective_deck": "data:\n  normalize_targets: standardize\n"}}
with open(f"{work}/run.json", "w") as f:
    json.dump(summary, f)
fig = run_main("plot_training", f"{work}/run.json", "-o", f"{work}/curves.png")
ax_l, ax_a = fig.axes
check(ax_l.get_yscale() == "log", f"loss axis scale {ax_l.get_yscale()}, expected log")
ticks = [t for t in ax_l.get_xticks() if 1 <= t <= 7]
check(len(ticks) >= 3 and all(float(t).is_integer() for t in ticks), f"epoch ticks {ticks}")
check("standardized targets" in ax_l.get_ylabel(), f"loss label {ax_l.get_ylabel()!r}")
check(ax_a.get_ylabel() == "test RMSE (targets' units)", f"metric label {ax_a.get_ylabel()!r}")
title = fig._suptitle.get_text()
for part in ("heat1d_surrogate.yaml", "2 ranks (D=1 x K=2)", "fill_drain", "M=4", "[load 12.7 > 2 cores]",
             "timings not representative"):
    check(part in title, f"title lacks {part!r}: {title!r}")
check(os.path.getsize(f"{work}/curves.png") > 10000, "curves.png not written")

# a metrics stream of a running job (a partial last line), classification, not overloaded
lines = [{"event": "start", "run_id": "a" * 16, "step": 0, "epoch": 1, "deck": "inputs/fashion_mnist_mlp.yaml",
          "ranks": 4, "replicas": 2, "cells": 2, "schedule": "1f1b", "micro_batches": 8,
          "loss": "softmax_cross_entropy", "machine_load": 0.5, "cores": 2}]
lines += [{"event": "progress", "run_id": "a" * 16, "step": s, "epoch": 1 + (s - 1) // 10,
           "epoch_step": (s - 1) % 10 + 1, "epoch_steps": 10, "loss": 2.0 / s, "learning_rate": 1e-3,
           "samples_per_second": 500.0, "rss_bytes": 1, "peak_rss_bytes": 1} for s in range(2, 30, 2)]
lines += [{"event": "epoch", "run_id": "a" * 16, "step": 10 * e, "epoch": e, "train_loss": 1.0 / e,
           "test_loss": 1.1 / e, "test_accuracy": 0.5 + 0.1 * e} for e in (1, 2)]
with open(f"{work}/m.jsonl", "w") as f:
    f.write("\n".join(json.dumps(r) for r in lines) + '\n{"event":"progress","run_id":"aaaa')
fig = run_main("plot_training", f"{work}/m.jsonl")
ax_l, ax_a = fig.axes
title = fig._suptitle.get_text()
check("4 ranks (D=2 x K=2), 1f1b, M=8" in title and "load" not in title, f"stream title {title!r}")
check(ax_a.get_ylabel() == "test accuracy (fraction correct)", f"accuracy label {ax_a.get_ylabel()!r}")
check("cross-entropy, nats" in ax_l.get_ylabel(), f"loss label {ax_l.get_ylabel()!r}")
check(len(ax_l.lines) == 3 and len(ax_l.lines[0].get_xdata()) == 14, "progress line of 14 records")
check(os.path.exists(f"{work}/m.png"), "m.png not written next to the stream")

# the timeline: a fill_drain step with the batched W box
import h5py  # noqa: E402
kinds = {"forward": 0, "backward": 1, "recompute": 2, "send": 3, "receive": 4, "wait": 5, "optimizer": 6,
         "allreduce": 7, "reduce_wait": 8, "backward_input": 9, "backward_weights": 10, "wire": 11,
         "link_wait": 12}
kind = h5py.enum_dtype(kinds, basetype="i1")
ev_t = np.dtype([("step", "<i8"), ("kind", kind), ("micro_batch", "<i4"), ("start", "<f8"), ("end", "<f8"),
                 ("bytes", "<i8")])
st_t = np.dtype([("step", "<i8"), ("start", "<f8"), ("end", "<f8"), ("step_time", "<f8"), ("idle_time", "<f8")])
with h5py.File(f"{work}/t.h5", "w") as f:
    f.attrs.update({"ranks": 2, "micro_batches": 2, "batch_size": 8, "schedule": "fill_drain",
                    "deck": "inputs/deep_mlp.yaml",
                    "run_record": json.dumps({"machine_load": {"start": 9.5, "cores": 2}})})
    for r in range(2):
        ev = [(1, 0, 0, 0.0 + r, 0.5 + r, 0), (1, 0, 1, 0.5 + r, 1.0 + r, 0), (1, 1, 1, 2.0, 2.5, 0),
              (1, 1, 0, 2.5, 3.0, 0), (1, 10, 0, 3.0, 4.0, 0), (1, 6, -1, 4.0, 4.2, 0)]
        f[f"rank_{r:04d}/events"] = np.array(ev, dtype=ev_t)
        f[f"rank_{r:04d}/steps"] = np.array([(1, 0.0, 4.2, 4.2, 1.0)], dtype=st_t)
fig = run_main("plot_timeline", f"{work}/t.h5", "-o", f"{work}/t.png")
legend = [t.get_text() for t in fig.legends[0].get_texts()]
check(any("all M = 2 micro-batches" in t for t in legend), f"legend lacks the batched W: {legend}")
check(any(t.startswith("backward (B: input gradients") for t in legend), f"legend's B: {legend}")
labels = [t.get_text() for t in fig.axes[0].texts]
check("W all 2" in labels or "W" in labels, f"W box labels {labels}")
title = fig.axes[0].get_title()
check("deep_mlp.yaml" in title and "load 9.5 > 2 cores" in title, f"timeline title {title!r}")

# the scaling plot: an overloaded point ringed and counted
study = f"{work}/study"
os.makedirs(study)
with open(f"{study}/study.json", "w") as f:
    json.dump({"mode": "strong", "N0": 256, "deck": "inputs/deep_mlp.yaml"}, f)
for K, X, load in ((1, 100.0, 0.5), (2, 180.0, 7.0)):
    with open(f"{study}/K{K}_M4.json", "w") as f:
        json.dump({"ranks": K, "cells": K, "micro_batches": 4, "batch_size": 256, "samples_per_second": X,
                   "bubble_fraction_analytical": (K - 1) / (K + 3),
                   "machine_load": {"start": load, "cores": 2}}, f)
fig = run_main("plot_scaling", study, "-o", f"{work}/s.png")
title = fig._suptitle.get_text()
check("1 point(s) on a machine loaded beyond its cores" in title, f"scaling title {title!r}")
ringed = [l for l in fig.axes[0].lines if l.get_markeredgecolor() == "#d00000" and len(l.get_xdata())]
check(len(ringed) == 1 and list(ringed[0].get_xdata()) == [2], "the K=2 point is ringed")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

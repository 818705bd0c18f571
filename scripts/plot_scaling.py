#!/usr/bin/env python3
"""Speedup and parallel efficiency of a scaling study, with the GPipe bubble prediction.

usage: scripts/plot_scaling.py OUT_DIR [-o scaling.png] [--mode strong|weak|hybrid|hybrid-weak]
                               [--csv FILE] [--no-plot]

OUT_DIR is what scripts/scaling_study.sh (or scripts/slurm/submit_study.sh)
writes: study.json ({"mode": "strong"|"weak", "N0": ..., "deck": ...}) and one
run summary K{k}_M{m}.json per run, with its trace K{k}_M{m}.h5; with
--repeats R, K{k}_M{m}_r{r}.json (r = 1..R) instead. K and M are read from the
summaries ("ranks", "micro_batches"), not from the file names.

Repeated points: X(K) is the median throughput of the repeats; the table
gives the repeats, the spread (max - min)/median in percent, and the machine
load (summary key machine_load.start: the largest 1-minute load average of the
run's hosts at its start); the plot draws the min..max range as error bars.
A spread of more than 10 % or a load above the host's cores marks a noisy point:
the plots ring a point whose machine was loaded beyond its cores (load >
machine_load.cores, the logical CPUs of rank 0's host) in red, and the title
counts them; such timings are not representative.

For each M, with X(K) the throughput (samples_per_second) at K ranks and Kb
the smallest K run at that M (normally 1):
  speedup     S(K) = X(K) / X(Kb)   (weak scaling, N = N0*K: the throughput ratio)
  efficiency  E(K) = S(K) / (K/Kb)
  predicted   P(K) = B(K) / B(Kb), B(K) = K*M/(M+K-1): balanced cells, no
              communication cost, only the fill-drain bubble (K-1)/(M+K-1);
              the same expression for strong and weak scaling.
Left panel: speedup with the ideal K/Kb and P(K) (dashed); right panel:
efficiency with the ideal 1 and P(K)/(K/Kb). Also prints the table, with the
measured bubble (summary key bubble_fraction_measured, else computed from the
trace: mean over ranks and sampled steps of idle_time/step_time) next to the
analytical one.

Hybrid studies (mode hybrid or hybrid-weak, run summaries D{d}_K{k}_M{m}.json,
D and K from the summaries' "replicas" and "cells"): a table and a CSV file
(default OUT_DIR/hybrid.csv; columns in HYBRID_COLUMNS) with, per (D, K, M),
the median samples/s, the pipeline and data-parallel communication per step,
their shares of the step (N / samples/s) and the all-reduce overlap, and a
plot (default OUT_DIR/hybrid.png): samples/s per D x K split (hybrid) or per
D (hybrid-weak, with the ideal D x X(1)), and the communication shares.
See docs/scaling-studies.md.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

PROG = "plot_scaling.py"
REQUIRED = ("ranks", "micro_batches", "batch_size", "samples_per_second")
MODES = ("strong", "weak", "hybrid", "hybrid-weak")


def die(msg):
    sys.exit(f"{PROG}: error: {msg}")


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        die(f"{path}: no such file")
    except (OSError, ValueError) as e:
        die(f"{path}: not valid JSON ({e})")


def trace_bubble(path):
    """Mean over ranks and sampled steps of idle_time/step_time in a trace, or None."""
    try:
        import h5py
        import numpy as np
    except ImportError:
        warn(f"cannot read {path} without h5py")
        return None
    try:
        with h5py.File(path, "r") as f:
            if "ranks" not in f.attrs:
                die(f"{path}: missing root attribute 'ranks'")
            fractions = []
            for r in range(int(f.attrs["ranks"])):
                name = f"rank_{r:04d}/steps"
                if name not in f:
                    die(f"{path}: missing dataset /{name}")
                st = f[name][()]
                for field in ("step_time", "idle_time"):
                    if st.dtype.names is None or field not in st.dtype.names:
                        die(f"{path}: /{name} lacks field '{field}'")
                # the first traced step is the warm-up: left out when there are more
                fractions.extend((st["idle_time"] / st["step_time"])[1 if len(st) > 1 else 0:])
            return float(np.mean(fractions)) if fractions else None
    except OSError as e:
        die(f"{path}: not a readable HDF5 file ({e})")


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def summaries(out_dir, pattern, name, required=REQUIRED):
    """(path, summary) of every run summary in out_dir whose file name matches
    `pattern` (e.g. K<k>_M<m>.json, `name` in the error), checked for the keys."""
    files = sorted(f for f in glob.glob(os.path.join(out_dir, "*.json"))
                   if re.fullmatch(pattern, os.path.basename(f)))
    if not files:
        die(f"{out_dir}: no run summaries {name}")
    for path in files:
        s = read_json(path)
        if not isinstance(s, dict):
            die(f"{path}: expected a JSON object")
        missing = [k for k in required if k not in s]
        if missing:
            die(f"{path}: missing key(s) {', '.join(missing)}")
        yield path, s


def load_runs(out_dir):
    """{(K, M): point} with the repeats of each point combined (median throughput)."""
    samples = {}
    for path, s in summaries(out_dir, r"K\d+_M\d+(_r\d+)?\.json", "K<k>_M<m>.json"):
        K, M = int(s.get("cells", s["ranks"])), int(s["micro_batches"])
        bubble = s.get("bubble_fraction_measured")
        trace = path[:-len(".json")] + ".h5"
        if bubble is None and os.path.exists(trace):
            bubble = trace_bubble(trace)
        load = run_load(s)
        samples.setdefault((K, M), []).append(
            {"path": path, "N": int(s["batch_size"]), "X": float(s["samples_per_second"]),
             "analytical": s.get("bubble_fraction_analytical", (K - 1) / (M + K - 1)),
             "measured": math.nan if bubble is None else float(bubble),
             "load": math.nan if load is None else float(load), "overloaded": overloaded(s)})
    runs = {}
    for (K, M), reps in samples.items():
        if len({r["N"] for r in reps}) > 1:
            die(f"K={K} M={M}: repeats with different batch sizes ({', '.join(r['path'] for r in reps)})")
        xs = [r["X"] for r in reps]
        measured = [r["measured"] for r in reps if not math.isnan(r["measured"])]
        loads = [r["load"] for r in reps if not math.isnan(r["load"])]
        X = median(xs)
        runs[K, M] = {"path": reps[0]["path"], "N": reps[0]["N"], "X": X, "X_min": min(xs),
                      "X_max": max(xs), "repeats": len(reps),
                      "spread": (max(xs) - min(xs)) / X if X > 0 else math.nan,
                      "analytical": reps[0]["analytical"],
                      "measured": median(measured) if measured else math.nan,
                      "load": max(loads) if loads else math.nan,
                      "overloaded": any(r["overloaded"] for r in reps)}
    return runs


def run_load(s):
    """The largest 1-minute load of a summary's hosts (start or end), or None."""
    load = s.get("machine_load") or {}
    values = [v for v in (load.get("start"), load.get("end")) if isinstance(v, (int, float))]
    return max(values) if values else None


def overloaded(s):
    """Whether a summary's machine was loaded beyond its cores (False when unknown)."""
    load, cores = run_load(s), (s.get("machine_load") or {}).get("cores")
    return bool(load is not None and cores and load > cores)


def mark_overloaded(ax, xs, ys, flags):
    """Red rings around the points of runs on machines loaded beyond their cores."""
    pts = [(x, y) for x, y, f in zip(xs, ys, flags) if f]
    if pts:
        ax.plot([x for x, _ in pts], [y for _, y in pts], "o", markersize=13, markerfacecolor="none",
                markeredgecolor="#d00000", markeredgewidth=1.5)
    return len(pts)


HYBRID_RE = r"D(\d+)_K(\d+)_M(\d+)(_r\d+)?\.json"
HYBRID_COLUMNS = ("D", "K", "ranks", "M", "N", "repeats", "samples_per_second", "spread_percent",
                  "relative", "step_seconds", "pipeline_comm_seconds_per_step",
                  "data_parallel_comm_seconds_per_step", "allreduce_seconds_per_step",
                  "pipeline_comm_share", "data_parallel_comm_share", "allreduce_overlap_fraction",
                  "bubble_measured", "bubble_analytical", "load")


def load_hybrid_runs(out_dir):
    """{(D, K, M): point} of a hybrid study, repeats combined (medians)."""
    samples = {}
    for path, s in summaries(out_dir, HYBRID_RE, "D<d>_K<k>_M<m>.json", REQUIRED + ("replicas", "cells")):
        D, K, M = int(s["replicas"]), int(s["cells"]), int(s["micro_batches"])
        c = s.get("communication") or {}
        get = lambda key: math.nan if c.get(key) is None else float(c[key])
        load = run_load(s)
        bubble = s.get("bubble_fraction_measured")
        samples.setdefault((D, K, M), []).append(
            {"path": path, "N": int(s["batch_size"]), "X": float(s["samples_per_second"]),
             "ranks": int(s["ranks"]),
             "pipeline": get("pipeline_seconds_per_step"),
             "data_parallel": get("data_parallel_seconds_per_step"),
             "allreduce": get("allreduce_seconds_per_step"),
             # no all-reduce without data parallelism: nothing to hide
             "overlap": get("allreduce_overlap_fraction") if D > 1 else math.nan,
             "analytical": s.get("bubble_fraction_analytical", (K - 1) / (M + K - 1)),
             "measured": math.nan if bubble is None else float(bubble),
             "load": math.nan if load is None else float(load), "overloaded": overloaded(s)})
    nanmedian = lambda v: median([x for x in v if not math.isnan(x)]) if any(
        not math.isnan(x) for x in v) else math.nan
    runs = {}
    for key, reps in samples.items():
        if len({r["N"] for r in reps}) > 1:
            die(f"D={key[0]} K={key[1]} M={key[2]}: repeats with different batch sizes")
        xs = [r["X"] for r in reps]
        X = median(xs)
        point = {"path": reps[0]["path"], "N": reps[0]["N"], "ranks": reps[0]["ranks"], "X": X,
                 "X_min": min(xs), "X_max": max(xs), "repeats": len(reps),
                 "spread": (max(xs) - min(xs)) / X if X > 0 else math.nan,
                 "analytical": reps[0]["analytical"],
                 "load": max((r["load"] for r in reps), default=math.nan),
                 "overloaded": any(r["overloaded"] for r in reps)}
        for field in ("pipeline", "data_parallel", "allreduce", "overlap", "measured"):
            point[field] = nanmedian([r[field] for r in reps])
        point["step"] = point["N"] / X if X > 0 else math.nan
        point["pipeline_share"] = point["pipeline"] / point["step"]
        point["data_parallel_share"] = point["data_parallel"] / point["step"]
        runs[key] = point
    return runs


def hybrid_report(a, mode, study, runs):
    """The table and CSV of a hybrid study; the plot unless --no-plot."""
    # relative: hybrid: X / X(D=1, K=P) at the same M (the pure pipeline on the same ranks);
    # hybrid-weak: weak efficiency X(D) / ((D/Db) X(Db)) at the same K and M, Db the smallest D.
    for (D, K, M), r in runs.items():
        if mode == "hybrid":
            base = [v for (d, k, m), v in runs.items() if m == M and d == 1]
            r["relative"] = r["X"] / base[0]["X"] if base else math.nan
        else:
            ds = sorted(d for d, k, m in runs if k == K and m == M)
            r["relative"] = r["X"] / ((D / ds[0]) * runs[ds[0], K, M]["X"])
    N0 = study.get("N0")
    if mode == "hybrid-weak" and N0 is not None:
        for (D, K, M), r in sorted(runs.items()):
            if r["N"] != N0 * D:
                warn(f"{r['path']}: batch_size {r['N']}, expected {N0 * D} = N0*D for hybrid-weak")
    nan = lambda v, spec: "" if math.isnan(v) else format(v, spec)
    rows = []
    for (D, K, M), r in sorted(runs.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        rows.append([D, K, r["ranks"], M, r["N"], r["repeats"], nan(r["X"], ".2f"),
                     nan(100 * r["spread"], ".1f"), nan(r["relative"], ".3f"), nan(r["step"], ".4g"),
                     nan(r["pipeline"], ".4g"), nan(r["data_parallel"], ".4g"),
                     nan(r["allreduce"], ".4g"), nan(r["pipeline_share"], ".4f"),
                     nan(r["data_parallel_share"], ".4f"), nan(r["overlap"], ".3f"),
                     nan(r["measured"], ".3f"), nan(r["analytical"], ".3f"), nan(r["load"], ".2f")])
    import csv
    csv_path = a.csv or os.path.join(a.out_dir, "hybrid.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HYBRID_COLUMNS)
        w.writerows(rows)
    print(f"{mode} scaling, {a.out_dir}" + (f", deck {study['deck']}" if "deck" in study else "")
          + (f", N0 = {N0}" if N0 is not None else ""))
    rel = "vs 1xP" if mode == "hybrid" else "weak eff"
    print(f"{'D':>3} {'K':>3} {'M':>4} {'N':>6} {'samples/s':>10} {rel:>9} {'pipe comm%':>10} "
          f"{'dp comm%':>9} {'overlap':>7} {'reps':>4} {'spread%':>7} {'load':>5}")
    show = lambda v, spec: "n/a" if v == "" else format(float(v), spec)
    for row in rows:
        D, K, _, M, N, reps, X, spread, relative, _, _, _, _, ps, ds, ov, _, _, load = row
        print(f"{D:>3} {K:>3} {M:>4} {N:>6} {X:>10} {show(relative, '.3f'):>9} "
              f"{show(ps and 100 * float(ps), '.2f'):>10} {show(ds and 100 * float(ds), '.2f'):>9} "
              f"{show(ov, '.3f'):>7} {reps:>4} {show(spread, '.1f'):>7} {show(load, '.2f'):>5}")
    print(f"wrote {csv_path}")
    if a.no_plot:
        return
    plt = pyplot()
    fig, (ax_x, ax_c) = plt.subplots(1, 2, figsize=(12, 4.8))
    ms = sorted({m for _, _, m in runs})
    marked = 0
    if mode == "hybrid":
        splits = sorted({(d, k) for d, k, _ in runs}, key=lambda dk: dk[1])
        labels = [f"{d}x{k}" for d, k in splits]
        width = 0.8 / len(ms)
        for i, M in enumerate(ms):
            xs = [j + (i - (len(ms) - 1) / 2) * width for j in range(len(splits))]
            ys = [runs[d, k, M]["X"] if (d, k, M) in runs else 0 for d, k in splits]
            err = [[runs[d, k, M]["X"] - runs[d, k, M]["X_min"] if (d, k, M) in runs else 0 for d, k in splits],
                   [runs[d, k, M]["X_max"] - runs[d, k, M]["X"] if (d, k, M) in runs else 0 for d, k in splits]]
            ax_x.bar(xs, ys, width, yerr=err, capsize=3, color=f"C{i % 10}", label=f"M = {M}")
            marked += mark_overloaded(ax_x, xs, ys, [(d, k, M) in runs and runs[d, k, M]["overloaded"]
                                                     for d, k in splits])
        ax_x.set_xticks(range(len(splits)))
        ax_x.set_xticklabels(labels)
        ax_x.set_xlabel("D x K (replicas x pipeline cells)")
        keys = [(d, k, M) for M in ms for d, k in splits if (d, k, M) in runs]
        clabels = [f"{d}x{k}\nM={M}" for d, k, M in keys]
    else:
        for i, M in enumerate(ms):
            for K in sorted({k for _, k, m in runs if m == M}):
                ds = sorted(d for d, k, m in runs if k == K and m == M)
                ax_x.plot(ds, [runs[d, K, M]["X"] for d in ds], "o-", color=f"C{i % 10}",
                          label=f"K = {K}, M = {M}")
                marked += mark_overloaded(ax_x, ds, [runs[d, K, M]["X"] for d in ds],
                                          [runs[d, K, M]["overloaded"] for d in ds])
                base = runs[ds[0], K, M]["X"] / ds[0]
                ax_x.plot(ds, [base * d for d in ds], ":", color=f"C{i % 10}", alpha=0.7)
        ax_x.plot([], [], ":", color="grey", label="ideal D x X(1)")
        ax_x.set_xlabel("D (replicas; N = N0·D)")
        ax_x.set_xticks(sorted({d for d, _, _ in runs}))
        keys = sorted(runs, key=lambda dkm: (dkm[2], dkm[1], dkm[0]))
        clabels = [f"D={d}\nK={k} M={M}" for d, k, M in keys]
    ax_x.set_ylabel("samples/s (training)")
    if marked:
        ax_x.plot([], [], "o", markersize=10, markerfacecolor="none", markeredgecolor="#d00000",
                  label="machine loaded beyond its cores")
    pipe = [100 * runs[key]["pipeline_share"] for key in keys]
    dp = [100 * runs[key]["data_parallel_share"] for key in keys]
    pipe = [0 if math.isnan(v) else v for v in pipe]
    dp = [0 if math.isnan(v) else v for v in dp]
    pos = range(len(keys))
    ax_c.bar(pos, pipe, color="C0", label="pipeline (send/receive)")
    ax_c.bar(pos, dp, bottom=pipe, color="C3", label="data-parallel (all-reduce not hidden)")
    for x, key, top in zip(pos, keys, (p + d for p, d in zip(pipe, dp))):
        ov = runs[key]["overlap"]
        if not math.isnan(ov):
            ax_c.annotate(f"{100 * ov:.0f}% hidden", (x, top), ha="center", va="bottom", fontsize=7)
    ax_c.set_ylim(0, 1.35 * max([p + d for p, d in zip(pipe, dp)] + [1e-3]))  # room for the legend
    ax_c.set_xticks(list(pos))
    ax_c.set_xticklabels(clabels, fontsize=7)
    ax_c.set_ylabel("communication, % of the step")
    for ax in (ax_x, ax_c):
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    deck = os.path.basename(str(study.get("deck", "")))
    what = {"hybrid": f"{study.get('max_ranks', '')} ranks, fixed N",
            "hybrid-weak": "N = N0·D"}[mode]
    fig.suptitle(f"{mode} scaling" + (f", {deck}" if deck else "") + f", {what}"
                 + (f"\n{marked} point(s) on a machine loaded beyond its cores (ringed): timings not "
                    "representative" if marked else ""), color="#b00000" if marked else "black")
    fig.tight_layout()
    out = a.output or os.path.join(a.out_dir, "hybrid.png")
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or a clear error."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        die(f"{e}; needs matplotlib (Debian: python3-matplotlib; if python3 is another "
            f"interpreter, run /usr/bin/python3 {sys.argv[0]}; hybrid studies: --no-plot for the table only)")
    return plt


def main():
    doc = "\n\n".join(x for x in __doc__.split("\n\n") if not x.startswith("usage:"))
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("-o", "--output",
                   help="PNG to write (default: OUT_DIR/scaling.png, hybrid: OUT_DIR/hybrid.png)")
    p.add_argument("--mode", choices=MODES, help="override study.json's mode")
    p.add_argument("--csv", help="hybrid: the CSV to write (default: OUT_DIR/hybrid.csv)")
    p.add_argument("--no-plot", action="store_true", help="the table (and CSV) only, no matplotlib")
    a = p.parse_args()
    if not os.path.isdir(a.out_dir):
        die(f"{a.out_dir}: no such directory")

    study_path = os.path.join(a.out_dir, "study.json")
    study = {}
    if os.path.exists(study_path) or not a.mode:
        if not os.path.exists(study_path):
            die(f"{study_path}: no such file (scripts/scaling_study.sh writes it); "
                "pass --mode strong|weak|hybrid|hybrid-weak to plot without it")
        study = read_json(study_path)
        if not isinstance(study, dict) or study.get("mode") not in MODES:
            die(f"{study_path}: key 'mode' must be one of {', '.join(MODES)}")
    mode = a.mode or study["mode"]
    if mode.startswith("hybrid"):
        hybrid_report(a, mode, study, load_hybrid_runs(a.out_dir))
        return
    runs = load_runs(a.out_dir)

    N0 = study.get("N0")
    for (K, M), r in sorted(runs.items()):
        expect = None if N0 is None else (N0 if mode == "strong" else N0 * K)
        if expect is not None and r["N"] != expect:
            warn(f"{r['path']}: batch_size {r['N']}, expected {expect} for {mode} scaling with N0 = {N0}")

    # Import late: the checks above work without matplotlib.
    if a.no_plot:
        die("--no-plot: for hybrid studies only (strong and weak tables come with the plot)")
    plt = pyplot()

    bubble_model = lambda K, M: K * M / (M + K - 1)
    label = "speedup" if mode == "strong" else "throughput ratio"
    print(f"{mode} scaling, {a.out_dir}" + (f", deck {study['deck']}" if "deck" in study else "")
          + (f", N0 = {N0}" if N0 is not None else ""))
    print(f"{'K':>3} {'M':>4} {'N':>6} {'samples/s':>10} {label:>16} {'efficiency':>10} "
          f"{'predicted':>9} {'bubble meas':>11} {'bubble anal':>11} {'reps':>4} {'spread%':>7} "
          f"{'load':>5}")
    nan = lambda v, spec: "n/a" if math.isnan(v) else format(v, spec)
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(12, 4.8))
    all_k = sorted({K for K, _ in runs})
    marked = 0
    Kb_all = set()
    for i, M in enumerate(sorted({M for _, M in runs})):
        ks = sorted(K for K, m in runs if m == M)
        Kb = ks[0]
        Kb_all.add(Kb)
        if Kb != 1:
            warn(f"M={M}: no K=1 run; speedups are relative to K={Kb}")
        base = runs[Kb, M]["X"]
        S = [runs[K, M]["X"] / base for K in ks]
        E = [s / (K / Kb) for s, K in zip(S, ks)]
        P = [bubble_model(K, M) / bubble_model(Kb, M) for K in ks]
        for K, s, e, pr in zip(ks, S, E, P):
            r = runs[K, M]
            print(f"{K:>3} {M:>4} {r['N']:>6} {r['X']:>10.1f} {s:>16.3f} {e:>10.3f} {pr:>9.3f} "
                  f"{nan(r['measured'], '.3f'):>11} {r['analytical']:>11.3f} {r['repeats']:>4} "
                  f"{nan(100 * r['spread'], '.1f'):>7} {nan(r['load'], '.2f'):>5}")
        color = f"C{i % 10}"
        # min..max of the repeats (zero-length bars for single runs)
        err = [[(runs[K, M]["X"] - runs[K, M]["X_min"]) / base for K in ks],
               [(runs[K, M]["X_max"] - runs[K, M]["X"]) / base for K in ks]]
        ax_s.errorbar(ks, S, yerr=err, fmt="none", ecolor=color, capsize=3, alpha=0.8)
        ax_s.plot(ks, S, "o-", color=color, label=f"M = {M}")
        flags = [runs[K, M]["overloaded"] for K in ks]
        marked += mark_overloaded(ax_s, ks, S, flags)
        mark_overloaded(ax_e, ks, E, flags)
        ax_s.plot(ks, P, "--", color=color, alpha=0.7)
        ax_e.plot(ks, E, "o-", color=color, label=f"M = {M}")
        ax_e.plot(ks, [pr / (K / Kb) for pr, K in zip(P, ks)], "--", color=color, alpha=0.7)

    kb = min(Kb_all)
    ax_s.plot(all_k, [K / kb for K in all_k], ":", color="black", label="ideal")
    ax_e.axhline(1.0, linestyle=":", color="black", label="ideal")
    ax_s.plot([], [], "--", color="grey", label="bubble model K·M/(M+K-1)")
    ax_e.plot([], [], "--", color="grey", label="bubble model M/(M+K-1)")
    if marked:
        for ax in (ax_s, ax_e):
            ax.plot([], [], "o", markersize=10, markerfacecolor="none", markeredgecolor="#d00000",
                    label="machine loaded beyond its cores")
    rel = "K = 1" if Kb_all == {1} else "the smallest K"
    ax_s.set_ylabel(f"{label} (relative to {rel})")
    ax_e.set_ylabel("parallel efficiency" if mode == "strong" else "weak-scaling efficiency")
    ax_e.set_ylim(0, 1.1)
    for ax in (ax_s, ax_e):
        ax.set_xlabel("K (ranks = pipeline cells)")
        ax.set_xticks(all_k)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    what = (f"fixed N = {N0}" if mode == "strong" else f"N = {N0}·K") if N0 is not None else ""
    deck = os.path.basename(str(study.get("deck", "")))
    fig.suptitle(f"{mode} scaling" + (f", {deck}" if deck else "") + (f", {what}" if what else "")
                 + (f"\n{marked} point(s) on a machine loaded beyond its cores (ringed): timings not "
                    "representative" if marked else ""), color="#b00000" if marked else "black")
    fig.tight_layout()
    out = a.output or os.path.join(a.out_dir, "scaling.png")
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The capacity study (GPipe, Huang et al. 2019, Table 1) on this machine and planned beyond it.

For a fixed device-memory budget per rank (--budget, default 512MiB), the
largest GPT of the inputs/kjv_gpt.yaml family (causal blocks of fixed width,
the number of blocks L varied) that trains one step on K = 1, 2, 4, 8 ranks
(pipeline cells), under fill_drain (GPipe's schedule) with
re-materialization never and always:

  1. binary search over L with the planner (gpipe-plan --json: the memory
     model, train/memory.hpp, under pipeline.memory_budget), no run;
  2. at the boundary L*, one real training step (gpipe-train, mpirun
     --oversubscribe -n K) with the budget in force: it must start and
     train, and its summary gives the measured peak device bytes per rank;
     L* + 1 must be refused (gpipe-train --check exits 2 with the
     pipeline.memory_budget error).

Then the same search with the planner alone for a GPU node and clusters
(--gpu-budget per rank, default 80GB: 8 x 80 GB per node, K up to 64),
on a wider model (GPipe's Transformer-L shape: width 2048, hidden 8192),
stated as predictions. Writes DIR/capacity.json, DIR/capacity.md (the
tables) and DIR/capacity.png (parameters vs K next to GPipe's Table 1).

  scripts/capacity_study.sh [--out DIR (runs/capacity)] [--budget 512MiB] [--ranks 1,2,4,8] [--no-run]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

# GPipe Table 1 (Huang et al. 2019): parameters of the largest model per
# number of accelerators. AmoebaNet-D on 8 GB NVIDIA P100s (Pipeline-k,
# re-materialization on; Naive-1 without GPipe: 82M), Transformer-L on
# 16 GB Cloud TPUv3 cores (Naive-1: 282.2M).
GPIPE_AMOEBANET = {1: 318e6, 2: 542e6, 4: 1.05e9, 8: 1.8e9}
GPIPE_TRANSFORMER = {1: 785.8e6, 8: 5.3e9, 32: 21.0e9, 128: 83.9e9}

# The measured family: kjv_gpt.yaml's blocks at width 256, context 64.
SMALL = dict(width=256, heads=4, hidden=1024, context=64, batch=8, micro_batches=4)
# The planned family: GPipe's Transformer-L blocks (width 2048, hidden 8192), context 512.
LARGE = dict(width=2048, heads=16, hidden=8192, context=512, batch=64, micro_batches=64)


def write_deck(path, family, layers):
    with open(os.path.join(ROOT, "inputs", "kjv_gpt.yaml")) as f:
        d = yaml.safe_load(f)
    d = copy.deepcopy(d)
    w = family["width"]
    d["model"]["input"] = family["context"]
    d["model"]["layers"] = (
        [{"type": "token_embedding", "vocabulary": 73, "width": w}, {"type": "pos_embed"}]
        + [{"type": "transformer_block", "heads": family["heads"], "hidden": family["hidden"], "causal": True}] * layers
        + [{"type": "lm_head", "vocabulary": 73}])
    d["data"]["sequence_length"] = family["context"]
    d["data"]["train_limit"] = family["batch"]
    d["data"]["test_limit"] = family["batch"]
    d["training"].update(epochs=1, batch_size=family["batch"], micro_batches=family["micro_batches"])
    d["optimizer"]["warmup_steps"] = 0
    d["pipeline"] = {"balance": "flops", "schedule": "fill_drain", "remat": "never"}
    d.pop("checkpoint", None)
    with open(path, "w") as f:
        yaml.safe_dump(d, f, sort_keys=False)
    return path


def plan(deck, ranks, remat, budget):
    r = subprocess.run([os.path.join(ARGS.build, "apps", "gpipe-plan"), deck, "--ranks", str(ranks), "--json",
                        "--set", f"pipeline.remat={remat}", "--set", f"pipeline.memory_budget={budget}"],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        return None  # e.g. more cells than layers
    return json.loads(r.stdout)


def largest(tmp, family, ranks, remat, budget):
    """The largest L whose every rank fits `budget` (the planner's verdict), and its plan."""
    deck = os.path.join(tmp, "search.yaml")
    fits = lambda L: (lambda p: p if p and p["fits_memory_budget"] else None)(plan(write_deck(deck, family, L), ranks, remat, budget))
    lo = max(1, ranks - 3)  # K cells need K layers: L + 3 >= K
    if not fits(lo):
        return 0, None
    hi = lo * 2
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, fits(lo)


def parameters(p):
    return sum(c["parameter_bytes"] for c in p["cells"]) // 4  # float


def confirm(tmp, family, ranks, remat, budget, layers):
    """One real step at L and the refusal of L + 1 (--check). Returns the summary's memory."""
    deck = write_deck(os.path.join(tmp, f"run_{ranks}_{remat}.yaml"), family, layers)
    summary = os.path.join(tmp, "summary.json")
    sets = ["--set", f"pipeline.remat={remat}", "--set", f"pipeline.memory_budget={budget}"]
    r = subprocess.run(["mpirun", "--oversubscribe", "-n", str(ranks), os.path.join(ARGS.build, "apps", "gpipe-train"),
                        deck, "--quiet", "--summary", summary] + sets, cwd=ROOT, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"capacity_study: L = {layers} at K = {ranks}, remat {remat} did not train:\n{r.stderr}")
    memory = json.load(open(summary))["memory"]
    over = write_deck(os.path.join(tmp, "over.yaml"), family, layers + 1)
    c = subprocess.run([os.path.join(ARGS.build, "apps", "gpipe-train"), over, "--check", "--ranks", str(ranks)] + sets,
                       cwd=ROOT, capture_output=True, text=True)
    if c.returncode != 2 or "pipeline.memory_budget" not in c.stderr:
        raise SystemExit(f"capacity_study: L = {layers + 1} at K = {ranks} was not refused:\n{c.stdout}{c.stderr}")
    memory["refused_next"] = c.stderr.strip().splitlines()[-1]
    return memory


def main():
    os.makedirs(ARGS.out, exist_ok=True)
    ranks = [int(k) for k in ARGS.ranks.split(",")]
    result = {"budget": ARGS.budget, "family": SMALL, "measured": [], "gpu_budget": ARGS.gpu_budget,
              "gpu_family": LARGE, "planned": []}
    with tempfile.TemporaryDirectory() as tmp:
        for remat in ("never", "always"):
            for K in ranks:
                L, p = largest(tmp, SMALL, K, remat, ARGS.budget)
                row = {"K": K, "remat": remat, "blocks": L, "parameters": parameters(p),
                       "predicted_bytes_per_rank": [c["memory_bytes"] for c in p["cells"]]}
                if not ARGS.no_run:
                    m = confirm(tmp, SMALL, K, remat, ARGS.budget, L)
                    row["measured_peak_bytes_per_rank"] = m["peak_device_bytes_per_rank"]
                    row["predicted_bytes_per_rank"] = m["predicted_bytes_per_rank"]
                    row["peak_rss_bytes_per_rank"] = m["peak_rss_bytes_per_rank"]
                    row["refused_next"] = m["refused_next"]
                print(f"capacity_study: K = {K}, remat {remat}: {L} blocks, {row['parameters'] / 1e6:.2f} M parameters",
                      file=sys.stderr)
                result["measured"].append(row)
        for remat in ("always",):
            for K in (1, 2, 4, 8, 16, 32, 64):
                L, p = largest(tmp, LARGE, K, remat, ARGS.gpu_budget)
                result["planned"].append({"K": K, "remat": remat, "blocks": L, "parameters": parameters(p),
                                          "max_bytes_per_rank": max(c["memory_bytes"] for c in p["cells"])})
                print(f"capacity_study: planned K = {K}: {L} blocks, {result['planned'][-1]['parameters'] / 1e9:.2f} G "
                      "parameters", file=sys.stderr)
    with open(os.path.join(ARGS.out, "capacity.json"), "w") as f:
        json.dump(result, f, indent=2)
    write_tables(result)
    plot(result)


def write_tables(r):
    lines = [f"Measured on this machine, budget {r['budget']} per rank (family: width {SMALL['width']}, "
             f"{SMALL['heads']} heads, hidden {SMALL['hidden']}, context {SMALL['context']}, batch {SMALL['batch']} "
             f"in M = {SMALL['micro_batches']}, AdamW, fill_drain, float):", "",
             "| K | remat | blocks L | parameters | params / K=1 | largest rank: predicted bytes | measured peak bytes "
             "| error |", "|---|---|---|---|---|---|---|---|"]
    base = {}
    for row in r["measured"]:
        base.setdefault(row["remat"], row["parameters"])
        p = row["predicted_bytes_per_rank"]
        q = row.get("measured_peak_bytes_per_rank")
        i = max(range(len(p)), key=lambda k: p[k])
        err = f"{100 * abs(p[i] - q[i]) / q[i]:.3f}%" if q else "not run"
        lines.append(f"| {row['K']} | {row['remat']} | {row['blocks']} | {row['parameters'] / 1e6:.2f} M "
                     f"| {row['parameters'] / base[row['remat']]:.2f} | {p[i]} | {q[i] if q else '-'} | {err} |")
    lines += ["", f"Planned (gpipe-plan, predictions, not measured), budget {r['gpu_budget']} per rank "
              f"(width {LARGE['width']}, hidden {LARGE['hidden']}, context {LARGE['context']}, remat always):", "",
              "| K | blocks L | parameters | params / K=1 | largest rank bytes |", "|---|---|---|---|---|"]
    for row in r["planned"]:
        lines.append(f"| {row['K']} | {row['blocks']} | {row['parameters'] / 1e9:.2f} G "
                     f"| {row['parameters'] / r['planned'][0]['parameters']:.2f} | {row['max_bytes_per_rank']} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(ARGS.out, "capacity.md"), "w") as f:
        f.write(text)
    print(text)


def plot(r):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for remat, marker in (("never", "o"), ("always", "s")):
        rows = [x for x in r["measured"] if x["remat"] == remat]
        ax[0].plot([x["K"] for x in rows], [x["parameters"] for x in rows], marker=marker,
                   label=f"gpipe-kokkos, measured, {r['budget']}/rank, remat {remat}")
        ax[1].plot([x["K"] for x in rows], [x["parameters"] / rows[0]["parameters"] for x in rows], marker=marker,
                   label=f"measured, remat {remat}")
    pl = r["planned"]
    ax[0].plot([x["K"] for x in pl], [x["parameters"] for x in pl], "--", marker="^",
               label=f"gpipe-plan, predicted, {r['gpu_budget']}/rank")
    ax[1].plot([x["K"] for x in pl], [x["parameters"] / pl[0]["parameters"] for x in pl], "--", marker="^",
               label="predicted (GPU budget)")
    for table, name, marker in ((GPIPE_AMOEBANET, "GPipe Table 1: AmoebaNet, 8 GB GPUs", "x"),
                                (GPIPE_TRANSFORMER, "GPipe Table 1: Transformer-L, 16 GB TPUs", "+")):
        ks = sorted(table)
        ax[0].plot(ks, [table[k] for k in ks], ":", marker=marker, label=name)
        ax[1].plot(ks, [table[k] / table[ks[0]] for k in ks], ":", marker=marker, label=name.split(":")[1])
    ks = sorted({x["K"] for x in pl})
    ax[1].plot(ks, ks, color="grey", lw=0.8, label="linear in K")
    for a in ax:
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("K (pipeline cells = devices)")
        a.grid(True, which="both", alpha=0.3)
    ax[0].set_ylabel("parameters of the largest model")
    ax[1].set_ylabel("parameters / parameters at the smallest K")
    ax[0].legend(fontsize=7)
    ax[1].legend(fontsize=7)
    fig.suptitle("Model capacity vs pipeline cells (per-rank memory budget)")
    fig.tight_layout()
    fig.savefig(os.path.join(ARGS.out, "capacity.png"), dpi=120)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "capacity"))
    ap.add_argument("--budget", default="512MiB")
    ap.add_argument("--gpu-budget", default="80GB")
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--no-run", action="store_true", help="the planner's search only (no training step)")
    ARGS = ap.parse_args()
    main()

#!/usr/bin/env python3
"""The prediction tables of docs/performance-model.md, from gpipe-plan --sweep --json.

    scripts/plan_predictions.py [--plan build/apps/gpipe-plan] scaling
    scripts/plan_predictions.py [--plan build/apps/gpipe-plan] best-m

scaling: for R = 16 ... 4096 ranks, the deep deck (ranks = cores of this
machine: its measured GEMM-rate curve, N = 32 R, 4 GiB per rank) and
inputs/large_transformer_plan.yaml (ranks = GPUs at an assumed 100 TFLOP/s
and an Adam step at 2000 GB/s, N = 1024 sequences, 80 GiB per rank), on 10GbE and hdr200: the best
(D, K, M, schedule) by samples/s within the memory per rank.

best-m: the deep deck on one pipeline (D = 1) of K = 1, 2, 4, 8, 16 cells
on this machine's shared memory: samples/s for every M (powers of 2 up to
N = 256) and schedule, the best M per K, and whether M >= 4K holds.

All numbers are predictions of the model, not measurements.
"""
import argparse
import json
import subprocess
import sys


def sweep(plan, deck, ranks, sets, extra):
    cmd = [plan, deck, "--ranks", str(ranks), "--sweep", "--json"] + extra
    for s in sets:
        cmd += ["--set", s]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def gib(b):
    return b / 2**30


def scaling(plan):
    cases = [
        ("deep_mlp", "inputs/deep_mlp.yaml", lambda r: [f"training.batch_size={32 * r}"], ["--memory-GiB", "4"]),
        ("large_transformer", "inputs/large_transformer_plan.yaml", lambda r: ["training.batch_size=1024"],
         ["--memory-GiB", "80", "--gflops", "100000", "--optimizer-GBps", "2000"]),
    ]
    print("| deck | link | R | N | best D x K | M | schedule | samples/s | per rank | bubble | memory/rank GiB | "
          "all-reduce exposed s | step s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, deck, sets, extra in cases:
        for link in ["10GbE", "hdr200"]:
            for r in [16, 64, 256, 1024, 4096]:
                s = sweep(plan, deck, r, sets(r), extra + ["--link", link])
                if s["best"] < 0:
                    print(f"| {name} | {link} | {r} | {s['batch_size']} | none fits | | | | | | | | |")
                    continue
                b = s["rows"][s["best"]]
                exposed = max(c["reduce_exposed_s"] for c in b["cells"])
                print(f"| {name} | {link} | {r} | {b['batch_size']} | {b['replicas']} x {b['cells_count']} | "
                      f"{b['micro_batches']} | {b['schedule']} | {b['samples_per_s']:.4g} | "
                      f"{b['samples_per_s'] / r:.3g} | {b['bubble_fraction']:.3f} | "
                      f"{gib(b['max_memory_bytes']):.2f} | {exposed:.3g} | {b['step_time_s']:.4g} |")


def best_m(plan):
    print("| K | schedule | best M | samples/s at best M | at M = 4K | M = 4K within 5 % of best | "
          "micro-batch rows at best M |")
    print("|---|---|---|---|---|---|---|")
    for k in [1, 2, 4, 8, 16]:
        s = sweep(plan, "inputs/deep_mlp.yaml", k, [f"parallel.cells={k}"], ["--link", "shm"])
        for sched in ["fill_drain", "1f1b", "zero_bubble"]:
            rows = [r for r in s["rows"] if r["cells_count"] == k and r["schedule"] == sched]
            best = max(rows, key=lambda r: r["samples_per_s"])
            at4k = [r for r in rows if r["micro_batches"] == 4 * k]
            a = at4k[0]["samples_per_s"] if at4k else None
            holds = "n/a" if a is None else ("yes" if a >= 0.95 * best["samples_per_s"] else "no")
            print(f"| {k} | {sched} | {best['micro_batches']} | {best['samples_per_s']:.1f} | "
                  f"{'n/a' if a is None else format(a, '.1f')} | {holds} | {best['micro_batch_rows']} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", default="build/apps/gpipe-plan")
    p.add_argument("table", choices=["scaling", "best-m"])
    a = p.parse_args()
    scaling(a.plan) if a.table == "scaling" else best_m(a.plan)


if __name__ == "__main__":
    sys.exit(main())

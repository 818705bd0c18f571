#!/usr/bin/env python3
"""Write a synthetic scaling study, to try the plot scripts without a build.

usage: scripts/make_synthetic_study.py OUT_DIR [--mode strong|weak] [--max-ranks 4]
                                      [--micro-batches "1 2 4 8"] [--batch 256]
                                      [--remat never|always] [--seed 0]

OUT_DIR gets what scripts/scaling_study.sh writes: study.json and, per run,
K{k}_M{m}.json (run summary) and K{k}_M{m}.h5 (trace), in the layouts of
docs/file-formats.md and docs/scaling-studies.md. The timings come from a
simulation of the fill-drain schedule of the 17-layer inputs/deep_mlp.yaml
(min-max balanced cells, a fixed cost per micro-batch, message latency,
+-3 % noise), not from gpipe-train, so the numbers are only plausible.

Then:  scripts/plot_scaling.py OUT_DIR;  scripts/plot_timeline.py OUT_DIR/K4_M8.h5
"""
import argparse
import json
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"make_synthetic_study.py: {e}; needs numpy and h5py "
             "(Debian: python3-h5py; try /usr/bin/python3 if python3 is another interpreter)")

KINDS = {"forward": 0, "backward": 1, "recompute": 2, "send": 3, "receive": 4, "wait": 5, "optimizer": 6}
FLOP_RATE = 20e9        # flop/s of one rank
MB_OVERHEAD = 60e-6     # s per op (kernel launches, bookkeeping)
LATENCY, BANDWIDTH = 20e-6, 5e9
STEPS, EVERY = 41, 10   # simulated steps; every 10th is sampled (0, 10, ..., 40)

# deep_mlp.yaml: 8 x (Dense 1024 + ReLU), then Dense 10; forward flops per sample.
WIDTHS = [784] + [1024] * 8 + [10]
LAYER_FLOPS, LAYER_OUT = [], []
for i in range(9):
    LAYER_FLOPS.append(2.0 * WIDTHS[i] * WIDTHS[i + 1]); LAYER_OUT.append(WIDTHS[i + 1])
    if i < 8:
        LAYER_FLOPS.append(float(WIDTHS[i + 1])); LAYER_OUT.append(WIDTHS[i + 1])


def partition(costs, k):
    """Contiguous split of costs into k non-empty cells minimizing the largest cell (DP)."""
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    best = [[np.inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for c in range(1, k + 1):
        for j in range(c, n + 1):
            for i in range(c - 1, j):
                v = max(best[c - 1][i], prefix[j] - prefix[i])
                if v < best[c][j]:
                    best[c][j], cut[c][j] = v, i
    counts, j = [], n
    for c in range(k, 0, -1):
        counts.append(j - cut[c][j]); j = cut[c][j]
    return counts[::-1]


def simulate(K, M, N, remat, rng):
    """Events and step rows per rank for STEPS consecutive fill-drain steps (no barrier)."""
    counts = partition(LAYER_FLOPS, K)
    first = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    cell_flops = [sum(LAYER_FLOPS[first[c]:first[c + 1]]) for c in range(K)]
    out_width = [LAYER_OUT[first[c + 1] - 1] for c in range(K)]
    sizes = [N // M + (1 if m < N % M else 0) for m in range(M)]
    noise = lambda: float(rng.lognormal(0.0, 0.03))
    t_fwd = lambda c, m: (MB_OVERHEAD + sizes[m] * cell_flops[c] / FLOP_RATE) * noise()
    t_opt = [MB_OVERHEAD + 1e-9 * cell_flops[c] for c in range(K)]
    events = [[] for _ in range(K)]
    steps = [[] for _ in range(K)]
    clock = [0.0] * K
    for s in range(STEPS):
        keep = s % EVERY == 0
        start = list(clock)
        log = [[] for _ in range(K)]

        def op(k, kind, m, t0, dt, nbytes=0):
            log[k].append((s, KINDS[kind], m, t0, t0 + dt, nbytes))
            clock[k] = t0 + dt

        def receive(k, m, arrival, nbytes):
            if arrival > clock[k]:
                op(k, "wait", m, clock[k], arrival - clock[k])
            op(k, "receive", m, clock[k], 5e-6, nbytes)

        fwd_arrival, bwd_arrival = {}, {}
        for m in range(M):
            for k in range(K):
                if k > 0:
                    receive(k, m, fwd_arrival[k, m], 4 * sizes[m] * out_width[k - 1])
                op(k, "forward", m, clock[k], t_fwd(k, m))
                if k < K - 1:
                    nbytes = 4 * sizes[m] * out_width[k]
                    op(k, "send", m, clock[k], 5e-6, nbytes)
                    fwd_arrival[k + 1, m] = clock[k] + LATENCY + nbytes / BANDWIDTH
        for m in reversed(range(M)):
            for k in reversed(range(K)):
                if remat == "always":
                    op(k, "recompute", m, clock[k], t_fwd(k, m))
                if k < K - 1:
                    receive(k, m, bwd_arrival[k, m], 4 * sizes[m] * out_width[k])
                op(k, "backward", m, clock[k], 2 * t_fwd(k, m))
                if k > 0:
                    nbytes = 4 * sizes[m] * out_width[k - 1]
                    op(k, "send", m, clock[k], 5e-6, nbytes)
                    bwd_arrival[k - 1, m] = clock[k] + LATENCY + nbytes / BANDWIDTH
        for k in range(K):
            op(k, "optimizer", -1, clock[k], t_opt[k] * noise())
            if not keep:
                continue
            dur = np.array([e[4] - e[3] for e in log[k]])
            kinds = np.array([e[1] for e in log[k]])
            compute = dur[np.isin(kinds, [0, 1, 2, 6])].sum()
            comm = dur[np.isin(kinds, [3, 4])].sum()
            step_time = clock[k] - start[k]
            idle = max(0.0, step_time - compute - comm)
            widths = LAYER_OUT[first[k]:first[k + 1]]
            kept = 1 if remat == "always" else M
            peak = 4 * -(-N // M) * (M * (WIDTHS[0] if k == 0 else out_width[k - 1])
                                     + kept * sum(widths[:-1]) + M * widths[-1])
            steps[k].append((s, start[k], clock[k], step_time, compute, comm, idle,
                             idle / step_time, peak))
            events[k].extend(log[k])
    return counts, events, steps


def write_trace(path, K, M, N, remat, deck, events, steps):
    kind = h5py.enum_dtype(KINDS, basetype="i1")
    ev_t = np.dtype([("step", "<i8"), ("kind", kind), ("micro_batch", "<i4"), ("start", "<f8"),
                     ("end", "<f8"), ("bytes", "<i8")])
    st_t = np.dtype([("step", "<i8"), ("start", "<f8"), ("end", "<f8"), ("step_time", "<f8"),
                     ("compute_time", "<f8"), ("comm_time", "<f8"), ("idle_time", "<f8"),
                     ("idle_fraction", "<f8"), ("peak_activation_bytes", "<i8")])
    measured = float(np.mean([row[7] for rows in steps for row in rows]))
    with h5py.File(path, "w") as f:
        f.attrs.update({"format_version": np.int32(1), "ranks": np.int32(K),
                        "micro_batches": np.int32(M), "batch_size": np.int32(N), "remat": remat,
                        "deck": deck, "library_version": "synthetic",
                        "bubble_fraction_analytical": (K - 1) / (M + K - 1),
                        "bubble_fraction_measured": measured})
        for k in range(K):
            g = f.create_group(f"rank_{k:04d}")
            g.create_dataset("events", data=np.array(events[k], dtype=ev_t))
            g.create_dataset("steps", data=np.array(steps[k], dtype=st_t))
    return measured


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--mode", choices=["strong", "weak"], default="strong")
    p.add_argument("--max-ranks", type=int, default=4)
    p.add_argument("--micro-batches", default="1 2 4 8")
    p.add_argument("--batch", type=int, default=256, help="N (strong) or N0 (weak, N = N0*K)")
    p.add_argument("--remat", choices=["never", "always"], default="never")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if not 1 <= a.max_ranks <= len(LAYER_FLOPS):
        sys.exit(f"make_synthetic_study.py: --max-ranks must be in 1..{len(LAYER_FLOPS)}")
    rng = np.random.default_rng(a.seed)
    deck = "inputs/deep_mlp.yaml"
    os.makedirs(a.out_dir, exist_ok=True)
    mbs = [int(m) for m in a.micro_batches.split()]
    with open(os.path.join(a.out_dir, "study.json"), "w") as f:
        json.dump({"mode": a.mode, "N0": a.batch, "deck": deck, "max_ranks": a.max_ranks,
                   "micro_batches": mbs, "extra_args": ["(synthetic)"]}, f, indent=2)
    for K in range(1, a.max_ranks + 1):
        N = a.batch * K if a.mode == "weak" else a.batch
        for M in mbs:
            if M > N:
                continue
            counts, events, steps = simulate(K, M, N, a.remat, rng)
            name = os.path.join(a.out_dir, f"K{K}_M{M}")
            measured = write_trace(name + ".h5", K, M, N, a.remat, deck, events, steps)
            step_time = float(np.mean([r[3] for r in steps[0][1:]]))
            summary = {
                "test_accuracy": 0.85, "test_loss": 0.42, "train_loss": 0.40,
                "samples_per_second": N / step_time, "epochs": 1, "batch_size": N,
                "micro_batches": M, "ranks": K, "precision": "float", "remat": a.remat,
                "partition": counts, "imbalance": 1.0,
                "bubble_fraction_analytical": (K - 1) / (M + K - 1),
                "bubble_fraction_measured": measured,
                "activation_bytes_per_cell": [int(rows[0][8]) for rows in steps],
                "history": [{"epoch": 1, "train_loss": 0.40, "test_loss": 0.42, "test_accuracy": 0.85,
                             "seconds": STEPS * step_time, "samples_per_second": N / step_time}],
                "wall_seconds": STEPS * step_time + 1.0, "version": "synthetic", "deck": deck}
            with open(name + ".json", "w") as f:
                json.dump(summary, f, indent=2)
            print(f"{name}.json/.h5: K={K} M={M} N={N} {N / step_time:.0f} samples/s, "
                  f"bubble {measured:.3f} (analytical {(K - 1) / (M + K - 1):.3f})")


if __name__ == "__main__":
    main()

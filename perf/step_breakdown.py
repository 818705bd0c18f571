#!/usr/bin/python3
"""Where each rank's step goes, from gpipe-train traces (docs/file-formats.md, "Trace").

    /usr/bin/python3 perf/step_breakdown.py [--from-step S] TRACE.h5 [TRACE.h5 ...]

For every trace and rank: the mean over the traced steps >= S (default 2:
the first steps pay one-off allocations and primitive creation) of the step
time and of the time in each event kind (ms), the rank's compute (forward,
backward, input and weight gradients, recompute, optimizer), and the step
minus that compute (waits, sends, the end-of-step checks). Then, for each
rank, the mean time of each forward in the step's order, and their excess
over the median forward (the first forwards of each stage in a step run
unpacked or pack the weights, kernels/gemm.hpp's FrozenWeights): a per-step
cost every schedule pays.

The last line per trace is the bound on the step the busiest rank's
compute sets (a schedule with no idle at all on that rank), and the
fill_drain-relative ceiling when a fill_drain trace is among the inputs.
"""
import argparse
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"step_breakdown.py: {e}; needs numpy and h5py (Debian: python3-h5py; run /usr/bin/python3)")

KINDS = ["F", "B", "R", "Send", "Recv", "Wait", "Opt", "AllReduce", "ReduceWait", "I", "W", "Wire", "LinkWait"]
COMPUTE = {"F", "B", "R", "I", "W", "Opt"}
OVERLAPPING = {"AllReduce", "Wire"}  # outside the step's accounting (trace.hpp)


def breakdown(path, first):
    with h5py.File(path, "r") as f:
        schedule = f.attrs.get("schedule", b"?")
        schedule = schedule.decode() if isinstance(schedule, bytes) else str(schedule)
        ranks = sorted(k for k in f.keys() if k.startswith("rank_"))
        if not ranks:
            sys.exit(f"step_breakdown.py: {path}: no rank_NNNN groups (not a gpipe trace)")
        out = []
        for r in ranks:
            ev, st = f[r + "/events"][:], f[r + "/steps"][:]
            steps = [s for s in st["step"] if s >= first]
            if not steps:
                sys.exit(f"step_breakdown.py: {path}: {r}: no traced step >= {first} (--from-step)")
            kinds, fwd = {}, {}
            for s in steps:
                e = ev[ev["step"] == s]
                for k in np.unique(e["kind"]):
                    sel = e[e["kind"] == k]
                    kinds[KINDS[k]] = kinds.get(KINDS[k], 0.0) + 1e3 * float(np.sum(sel["end"] - sel["start"]))
                for i, (a, b) in enumerate(zip(*(e[e["kind"] == 0][c] for c in ("start", "end")))):
                    fwd.setdefault(i, []).append(1e3 * (b - a))
            n = len(steps)
            kinds = {k: v / n for k, v in kinds.items()}
            step = 1e3 * float(np.mean(st["step_time"][np.isin(st["step"], steps)]))
            compute = sum(v for k, v in kinds.items() if k in COMPUTE)
            out.append((r, step, kinds, compute, {i: float(np.mean(v)) for i, v in fwd.items()}))
    return schedule, out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--from-step", type=int, default=2)
    a = p.parse_args()
    fill_drain_step = None
    results = []
    for path in a.traces:
        schedule, ranks = breakdown(path, a.from_step)
        results.append((path, schedule, ranks))
        if schedule == "fill_drain":
            fill_drain_step = max(r[1] for r in ranks)
    for path, schedule, ranks in results:
        print(f"{path} ({schedule})")
        for r, step, kinds, compute, fwd in ranks:
            parts = " ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items()) if k not in OVERLAPPING)
            print(f"  {r}: step {step:.2f} ms = compute {compute:.2f} + other {step - compute:.2f}  [{parts}]")
            pos = sorted(fwd)
            if pos:
                median = float(np.median([fwd[i] for i in pos]))
                print(f"    forwards in order (ms): " + " ".join(f"{fwd[i]:.2f}" for i in pos) +
                      f"; excess over the median {sum(fwd[i] - median for i in pos):.2f}")
        busiest = max(ranks, key=lambda x: x[3])
        step = max(x[1] for x in ranks)
        line = f"  busiest rank {busiest[0]}: compute {busiest[3]:.2f} ms, step {step:.2f} ms"
        if fill_drain_step:
            line += (f"; vs fill_drain's step {fill_drain_step:.2f}: this {fill_drain_step / step:.3f}x, "
                     f"ceiling with no idle on the busiest rank {fill_drain_step / busiest[3]:.3f}x")
        print(line)


if __name__ == "__main__":
    main()

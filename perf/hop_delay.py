#!/usr/bin/env python3
"""Per-hop delivery delay measured from a gpipe-train trace (docs/file-formats.md, "Traces").

A hop's delay is the time from a rank posting a send (the end of its `send`
event) to the receiver, already waiting for that micro-batch, ending its
`wait` and starting the op that needs it: how late a waiting rank notices a
message (wake-up, MPI progress, the message itself). That is what
gpipe-plan's --wait-hop-us prices (docs/performance-model.md, "Per-hop delay").

The ranks' clocks share an origin taken after a start-up barrier, but they
leave it at different times (milliseconds apart with oversubscribed ranks),
so a cross-rank difference carries the pair's clock offset. It cancels in
the mean of the two directions: for each pair of neighbours (a, a + 1), the
median over forward hops (a's send after F(m) to a + 1's wait before its
F(m)) and over backward hops (a + 1's send after B or I of m to a's wait
before its B or I of m) are each delay +/- offset; their mean is the delay.
Only waits of at least WAITED_S (the receiver really waited) count, and each
rank's first traced step (the warm-up) is left out when it traced more. One
stage per rank (fill_drain, 1f1b, zero_bubble): the calibration run of
perf/schedules_emulated.sh is 1f1b.

    perf/hop_delay.py TRACE.h5 [...]     per trace: pairs, hops, the delay (us) and its range over pairs
    perf/hop_delay.py --mean-us TRACE.h5 the delay alone (us), for gpipe-plan --wait-hop-us
"""
import sys

import h5py
import numpy as np

WAITED_S = 2e-4  # a wait this long: the receiver was waiting when the message was sent
FORWARD, BACKWARD = (0,), (1, 9)  # event kinds: forward; fused backward, backward_input
SEND, WAIT = 3, 5


def _ops(events):
    """{(step, kind group, micro_batch): (end of the send after it or None, end of the wait before it if long)}"""
    out = {}
    ev = events[np.argsort(events["start"], kind="stable")]
    for i, e in enumerate(ev):
        group = "F" if e["kind"] in FORWARD else "B" if e["kind"] in BACKWARD else None
        if group is None:
            continue
        send = None
        for j in range(i + 1, min(i + 3, len(ev))):
            if ev[j]["kind"] == SEND and ev[j]["micro_batch"] == e["micro_batch"]:
                send = ev[j]["end"]
                break
        wait = None
        if i > 0 and ev[i - 1]["kind"] == WAIT and ev[i - 1]["micro_batch"] == e["micro_batch"] and \
                ev[i - 1]["end"] - ev[i - 1]["start"] >= WAITED_S:
            wait = ev[i - 1]["end"]
        out[(int(e["step"]), group, int(e["micro_batch"]))] = (send, wait)
    return out


def pair_delays(path):
    """[(a, delay s, forward hops, backward hops)] for each neighbour pair with hops both ways."""
    with h5py.File(path, "r") as f:
        ranks = sorted(k for k in f.keys() if k.startswith("rank_"))
        ops = []
        for r in ranks:
            ev = f[r]["events"][()]
            st = f[r]["steps"][()]["step"]
            keep = st[1:] if len(st) > 1 else st
            ops.append(_ops(ev[np.isin(ev["step"], keep)]))
    out = []
    for a in range(len(ops) - 1):
        b = a + 1
        fwd = [ops[b][k][1] - s for k, (s, _) in ops[a].items()
               if k[1] == "F" and s is not None and k in ops[b] and ops[b][k][1] is not None]
        bwd = [ops[a][k][1] - s for k, (s, _) in ops[b].items()
               if k[1] == "B" and s is not None and k in ops[a] and ops[a][k][1] is not None]
        if fwd and bwd:
            out.append((a, (np.median(fwd) + np.median(bwd)) / 2, len(fwd), len(bwd)))
    return out


def summary(path):
    pairs = pair_delays(path)
    if not pairs:
        return {"pairs": 0}
    d = np.array([p[1] for p in pairs])
    return {"pairs": len(pairs), "hops": int(sum(p[2] + p[3] for p in pairs)), "mean_us": float(d.mean() * 1e6),
            "min_us": float(d.min() * 1e6), "max_us": float(d.max() * 1e6)}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--mean-us":
        if len(sys.argv) != 3:
            sys.exit(__doc__)
        s = summary(sys.argv[2])
        if s["pairs"] == 0:
            sys.exit(f"{sys.argv[2]}: no neighbour pair with waited hops both ways")
        print(f"{max(s['mean_us'], 0.0):.1f}")
        return
    for path in sys.argv[1:]:
        s = summary(path)
        if s["pairs"] == 0:
            print(f"{path}: no neighbour pair with waited hops both ways")
        else:
            print(f"{path}: {s['pairs']} pairs, {s['hops']} hops, delay {s['mean_us']:.0f} us "
                  f"(pairs {s['min_us']:.0f} .. {s['max_us']:.0f})")


if __name__ == "__main__":
    main()

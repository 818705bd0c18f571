#!/usr/bin/env python3
"""How late a sleeping thread wakes up on this machine now: the cost a
pipeline.wait: sleep rank pays, on top of its poll period, to notice a
message (include/gpipe/pipeline/wait.hpp), and what a hop costs when the
receiver has to be scheduled onto a core (docs/performance-model.md,
"Per-hop delay").

usage: perf/wake_probe.py [--us US] [--seconds S] [--until-file FILE] [--json]

Sleeps US microseconds (default 50, kWaitSleepMaxUs) with a timer slack of
1 us (as transport.cpp sets it), again and again, for S seconds (default
1), or until FILE exists (--until-file: sample alongside a run), pausing
1 ms between samples, and prints the overshoot (the wake-up delay beyond
US): median, mean, p90, p99, in us, and hop_us: how late a rank that
waits in such polls notices a message arriving at a random time, E[P^2] /
(2 E[P]) over the poll periods P = US + overshoot (gpipe-plan
--wait-hop-us). Under load it is dominated by the rare wake-ups that wait
milliseconds for a core.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--us", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--until-file")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    if sys.platform.startswith("linux"):
        libc.prctl(29, ctypes.c_ulong(1000), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))  # PR_SET_TIMERSLACK
    req = Timespec(0, int(a.us * 1000))
    gap = Timespec(0, 1000000)
    late = []
    t_end = time.monotonic() + a.seconds
    while (os.path.exists(a.until_file) is False) if a.until_file else time.monotonic() < t_end:
        t0 = time.perf_counter_ns()
        libc.nanosleep(ctypes.byref(req), None)
        late.append((time.perf_counter_ns() - t0) / 1000.0 - a.us)
        libc.nanosleep(ctypes.byref(gap), None)
        if a.until_file and len(late) > 10 ** 6:
            break
    if not late:
        sys.exit("wake_probe.py: no sample")
    late.sort()
    n = len(late)
    periods = [a.us + x for x in late]  # a long wait's poll periods: one sleep and its overshoot each
    out = {"sleep_us": a.us, "samples": n, "median_us": statistics.median(late), "mean_us": statistics.mean(late),
           "p90_us": late[int(0.9 * (n - 1))], "p99_us": late[int(0.99 * (n - 1))],
           # a message arriving at a random time during a waiting rank's polls is noticed at the end of its
           # period: E[P^2] / (2 E[P]) later (long periods catch more arrivals)
           "hop_us": sum(p * p for p in periods) / (2 * sum(periods))}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"sleep {a.us:g} us x {n}: overshoot median {out['median_us']:.1f} us, mean {out['mean_us']:.1f}, "
              f"p90 {out['p90_us']:.1f}, p99 {out['p99_us']:.1f}; a waiting rank notices a message "
              f"{out['hop_us']:.1f} us late on average")


if __name__ == "__main__":
    main()

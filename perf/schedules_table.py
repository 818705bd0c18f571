#!/usr/bin/env python3
"""The schedules table (perf/README.md) from perf/schedules_table.sh's run summaries.

For each deck, schedule (with its pipeline.w_group when a run file is
<deck>_<schedule>_w<N>_M<m>.json) and M (K = 2): samples/s of the training epoch, the
idle fraction measured from the traces (the summary's
bubble_fraction_measured: mean over ranks and traced steps of idle/step
time) against the schedule's analytical bubble, and the activation bytes of
cell 0 and the largest over cells (the exact buffer-plan accounting,
activation_bytes_per_cell).

    perf/schedules_table.py runs/schedules
"""
import glob
import json
import os
import re
import sys


SCHEDULES = ["fill_drain", "1f1b", "zero_bubble", "interleaved_1f1b", "zb_v", "dualpipe_v"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    rows = []
    for path in glob.glob(os.path.join(folder, "*_M*.json")):
        match = re.fullmatch(r"(.+)_(" + "|".join(SCHEDULES) + r")(?:_w(\d+))?_M(\d+)\.json",
                             os.path.basename(path))
        if not match:
            continue
        with open(path) as f:
            s = json.load(f)
        group = int(match.group(3) or 1)
        rows.append((match.group(1), (SCHEDULES.index(match.group(2)), group), int(match.group(4)), s, group))
    if not rows:
        sys.exit(f"{folder}: no <deck>_<schedule>_M<m>.json run summaries")
    print("| deck | schedule | M | samples/s | idle (traces) | idle (analytical) | "
          "activation MiB, cell 0 | max over cells |")
    print("|---|---|---|---|---|---|---|---|")
    for deck, _, m, s, group in sorted(rows, key=lambda r: (r[0], r[1], r[2])):
        sps = s.get("samples_per_second")
        idle = s.get("bubble_fraction_measured")
        cells = s.get("activation_bytes_per_cell") or [0]
        fmt = lambda v, f: "n/a" if v is None else format(v, f)
        name = s["schedule"] + (f", w_group {group}" if group > 1 else "")
        print(f"| {deck} | {name} | {m} | {fmt(sps, '.1f')} | {fmt(idle, '.3f')} | "
              f"{s['bubble_fraction_analytical']:.3f} | {cells[0] / 2**20:.2f} | {max(cells) / 2**20:.2f} |")
    loads = [(r[3].get("machine_load") or {}).get("start") for r in rows]
    loads = [x for x in loads if x is not None]
    if loads:
        print(f"\nmachine load at the runs' start: {min(loads):.2f} .. {max(loads):.2f}")


if __name__ == "__main__":
    main()

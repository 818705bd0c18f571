#!/usr/bin/python3
"""Half-size boundary messages over an emulated slow link (issue 22): bf16
against float messages at K = 2 (and 4), pipeline.link at 1 Gb/s.

    /usr/bin/python3 perf/mixed_precision/link.py                 # K = 2, quickstart and CNN, M = 8
    /usr/bin/python3 perf/mixed_precision/link.py --ranks 2,4 --steps 8

For each deck, K and precision (float, bf16) it runs gpipe-train on K ranks
(one cell each, `mpirun --oversubscribe`) for `--steps` steps, once without a
link (compute-only) and once with `pipeline.link` ({bandwidth_gbps, latency_us},
docs/input-deck.md), each with a trace; throughput is scripts/link_study.py's:
the mini-batch over the median slowest-rank step time, the first (warm-up)
step left out. Prints a markdown table: samples/s compute-only and linked per
precision, the linked bf16 / float gain, the wire time per step of each
(summary communication.link.wire_seconds_per_step), the boundary bytes per
step, and `uptime` before and after (a K-rank run on a shared machine is
CPU-bound under load, which hides the link: the `link wait` columns say how
much of a step waited for the wire).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from link_study import step_times  # noqa: E402  (the study's own throughput definition)

TRAIN = os.path.join(ROOT, "build", "apps", "gpipe-train")
DECKS = {"quickstart": "inputs/fashion_mnist_mlp.yaml", "cnn": "inputs/fashion_mnist_cnn.yaml",
         "deep_mlp": "inputs/deep_mlp.yaml", "vit": "inputs/fashion_mnist_vit.yaml"}


def batch_of(deck):
    for line in open(os.path.join(ROOT, deck)):
        s = line.strip()
        if s.startswith("batch_size:"):
            return int(s.split(":")[1].split("#")[0])
    raise SystemExit(f"{deck}: no batch_size")


def run(a, deck, ranks, precision, link):
    n = batch_of(deck)
    with tempfile.TemporaryDirectory() as d:
        summary, trace = os.path.join(d, "s.json"), os.path.join(d, "t.h5")
        cmd = ["mpirun", "--oversubscribe", "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["-n", str(ranks), a.train, os.path.join(ROOT, deck), "--quiet", "--summary", summary,
                "--trace", trace, "--set", "trace.every=1", "--set", f"precision={precision}",
                "--set", f"training.micro_batches={a.micro_batches}", "--set", "training.epochs=1",
                "--set", f"data.train_limit={n * a.steps}", "--set", f"data.test_limit={n}",
                "--set", "training.progress_every=0"]
        if link:
            cmd += ["--set", f"pipeline.link.bandwidth_gbps={a.bandwidth}",
                    "--set", f"pipeline.link.latency_us={a.latency}"]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        s = json.load(open(summary))
        step, _, _ = step_times(trace)
        comm = (s.get("communication") or {}).get("link") or {}
        return {"samples_per_second": s["batch_size"] / step, "step": step,
                "wire": comm.get("wire_seconds_per_step"), "wait": comm.get("link_wait_seconds_per_step"),
                "bytes": s.get("boundary_bytes_per_step")}


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decks", default="quickstart,cnn", help="comma list of " + ", ".join(DECKS))
    p.add_argument("--ranks", default="2", help="comma list of K (one cell per rank)")
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--bandwidth", type=float, default=1.0, help="Gb/s (pipeline.link.bandwidth_gbps)")
    p.add_argument("--latency", type=float, default=20.0, help="us (pipeline.link.latency_us)")
    p.add_argument("--steps", type=int, default=6, help="steps per run, the first a warm-up")
    p.add_argument("--train", default=TRAIN)
    a = p.parse_args()
    if not os.path.exists(a.train):
        sys.exit(f"{a.train} is not built")
    print("before:", uptime())
    rows = []
    for name in a.decks.split(","):
        for k in (int(x) for x in a.ranks.split(",")):
            r = {(pr, link): run(a, DECKS[name], k, pr, link) for pr in ("float", "bf16") for link in (False, True)}
            rows.append((name, k, r))
            print(f"{name} K={k} done", file=sys.stderr, flush=True)
    print("after:", uptime())
    print()
    print(f"link {a.bandwidth:g} Gb/s, {a.latency:g} us; M = {a.micro_batches}; samples/s")
    print()
    print("| deck | K | float compute-only | float linked | bf16 compute-only | bf16 linked | "
          "linked bf16 / float | wire ms/step float | wire ms/step bf16 | link wait ms/step float | "
          "link wait ms/step bf16 | boundary bytes/step float | bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ms = lambda v: "" if v is None else f"{v * 1e3:.2f}"  # noqa: E731
    for name, k, r in rows:
        f, b = r[("float", True)], r[("bf16", True)]
        print(f"| {name} | {k} | {r[('float', False)]['samples_per_second']:.0f} | {f['samples_per_second']:.0f} "
              f"| {r[('bf16', False)]['samples_per_second']:.0f} | {b['samples_per_second']:.0f} "
              f"| {b['samples_per_second'] / f['samples_per_second']:.2f}x | {ms(f['wire'])} | {ms(b['wire'])} "
              f"| {ms(f['wait'])} | {ms(b['wait'])} | {f['bytes']} | {b['bytes']} |")


if __name__ == "__main__":
    main()

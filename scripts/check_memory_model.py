#!/usr/bin/env python3
"""The memory model against the measurement, for every deck in inputs/.

Trains each deck for one step (data.train_limit = training.batch_size, a
small test set, no checkpoints or trace) with gpipe-train --summary and
compares, per rank, the model's bytes (summary memory.predicted_bytes_per_rank,
train/memory.hpp) with the high-water mark of the Kokkos allocations in the
device memory space (memory.peak_device_bytes_per_rank, core/memory.hpp).
Prints a Markdown table; exits 1 when a rank is off by more than --tolerance
(default 5%). Decks without a data set (inputs/large_transformer_plan.yaml,
planning only) are listed as skipped. Missing generated data (data/emulated_*,
data/heat1d_*, data/kjv_*) is made with the scripts setup.sh uses. The
README's quickstart, CNN and ViT decks are also run in bf16 (--set
precision=bf16: 16-bit activation storage, the bf16 weight copy, the seam's
operand scratch); --precision P runs every deck in P instead.

  scripts/check_memory_model.py [--build build] [--deck inputs/kjv_gpt.yaml ...] [--precision bf16]
                                [--tolerance 0.05]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATORS = {
    "data/emulated_train.h5": ["scripts/make_emulated_data.py", "data"],
    "data/heat1d_train.h5": ["scripts/make_heat1d_data.py", "data"],
    "data/kjv_train.h5": ["scripts/make_text_data.py", "data"],
}

BF16_DECKS = ("fashion_mnist_mlp.yaml", "fashion_mnist_cnn.yaml", "fashion_mnist_vit.yaml")


def ranks_of(deck):
    cells = (deck.get("parallel") or {}).get("cells", 0) or 0
    return max(2, int(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--deck", action="append", help="decks to check (default: inputs/*.yaml)")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--precision", help="run every deck in this precision (default: as written, and bf16 "
                                        "for the quickstart, CNN and ViT decks)")
    args = ap.parse_args()
    paths = args.deck or sorted(glob.glob(os.path.join(ROOT, "inputs", "*.yaml")))
    if args.precision:
        decks = [(p, args.precision) for p in paths]
    else:
        decks = [(p, None) for p in paths]
        decks += [(p, "bf16") for p in paths if os.path.basename(p) in BF16_DECKS]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print("| deck | ranks | rank | predicted bytes | measured peak bytes | error | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    worst, failed = 0.0, False
    with tempfile.TemporaryDirectory() as tmp:
        for path, precision in decks:
            with open(path) as f:
                deck = yaml.safe_load(f)
            data = deck.get("data") or {}
            train = data.get("train_file") or data.get("train_images")
            if train in GENERATORS and not os.path.exists(os.path.join(ROOT, train)):
                subprocess.run([sys.executable] + GENERATORS[train], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            name = os.path.relpath(path, ROOT) + (f" ({precision})" if precision else "")
            if not os.path.exists(os.path.join(ROOT, train)):
                print(f"| {name} | - | - | - | - | skipped: no data set ({train}) | - |")
                continue
            batch = deck["training"]["batch_size"]
            ranks = ranks_of(deck)
            summary = os.path.join(tmp, "s.json")
            cmd = ["mpirun", "--oversubscribe", "-n", str(ranks), os.path.join(args.build, "apps", "gpipe-train"),
                   path, "--quiet", "--summary", summary, "--set", "training.epochs=1",
                   "--set", f"data.train_limit={batch}", "--set", f"data.test_limit={batch}",
                   "--set", "checkpoint.directory=" + os.path.join(tmp, "ckpt"), "--set", "checkpoint.every_epochs=0"]
            if precision:
                cmd += ["--set", f"precision={precision}"]
            r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"| {name} | {ranks} | - | - | - | FAILED to run: {r.stderr.strip().splitlines()[-1:]} | - |")
                failed = True
                continue
            m = json.load(open(summary))["memory"]
            for rank, (p, q, rss) in enumerate(zip(m["predicted_bytes_per_rank"], m["peak_device_bytes_per_rank"],
                                                   m["peak_rss_bytes_per_rank"])):
                err = abs(p - q) / q
                worst = max(worst, err)
                bad = err > args.tolerance
                failed |= bad
                print(f"| {name} | {ranks} | {rank} | {p} | {q} | {100 * err:.3f}%{' OVER' if bad else ''} "
                      f"| {rss / 2**20:.1f} |")
    print(f"\nlargest error {100 * worst:.3f}% (tolerance {100 * args.tolerance:.1f}%)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Mixed precision side by side (issue 22): gpipe-train bf16 vs float, and
vs PyTorch autocast bf16 / float32, one process, one thread, on the deep
MLP, the CNN and the ViT decks; optionally test accuracy bf16 vs float.

    /usr/bin/python3 perf/mixed_precision/run.py            # speed table
    /usr/bin/python3 perf/mixed_precision/run.py --accuracy --epochs 1
    /usr/bin/python3 perf/mixed_precision/run.py --routes   # + bf16 on the rounded route

Speed: each side trains `--steps` steps (gpipe-train: data.train_limit =
steps x batch, M = 1, one epoch, samples_per_second of its summary;
PyTorch: torch_autocast.py's plain loop), sides alternated `--repeats`
times, best of each kept. Accuracy: gpipe-train on the quickstart, CNN and
ViT decks (their own M, 1 process) for `--epochs` epochs, float and bf16
(and fp16 with --fp16), test_accuracy of the summaries. Prints a markdown
table; `uptime` before and after (the machine is shared: figures are under
load unless the load average is near 0).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRAIN = os.path.join(ROOT, "build", "apps", "gpipe-train")
DECKS = {"mlp": ("inputs/deep_mlp.yaml", 256), "cnn": ("inputs/fashion_mnist_cnn.yaml", 128),
         "vit": ("inputs/fashion_mnist_vit.yaml", 128)}
ARGS = None
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def gpipe(deck, precision, sets, env=None):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        cmd = [ARGS.train, os.path.join(ROOT, deck), "--quiet", "--summary", summary, "--set", "precision=" + precision]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, env=dict(ENV, **(env or {})), cwd=ROOT, stdout=subprocess.DEVNULL)
        with open(summary) as f:
            return json.load(f)


def torch(model, dtype, steps):
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "perf", "mixed_precision", "torch_autocast.py"),
                          "--model", model, "--dtype", dtype, "--steps", str(steps)],
                         check=True, env=ENV, capture_output=True, text=True).stdout
    return json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[7:])


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def speed(a):
    print("before:", uptime())
    rows = []
    for model in a.models.split(","):
        deck, batch = DECKS[model]
        sets = ["training.epochs=1", "training.micro_batches=1", f"data.train_limit={a.steps * batch}",
                "data.test_limit=256", "training.progress_every=0"]
        best = {}
        for _ in range(a.repeats):
            sides = ["gpipe float", "gpipe bf16"] + (["gpipe bf16 rounded"] if a.routes else []) + ["torch float", "torch bf16"]
            for side in sides:
                who, dtype = side.split()[:2]
                if who == "gpipe":
                    # --routes: "gpipe bf16" is what kernels: auto picks, "gpipe bf16 rounded" the
                    # rounded route forced (GPIPE_BF16_ROUTE=rounded: the f32 primitives on
                    # rounded operands), side by side.
                    env = {"GPIPE_BF16_ROUTE": "rounded"} if side.endswith("rounded") else None
                    v = gpipe(deck, dtype, sets, env)["samples_per_second"]
                else:
                    v = torch(model, dtype, a.steps)["samples_per_second"]
                best[side] = max(best.get(side, 0), v)
        rows.append((model, best))
    print("after:", uptime())
    print()
    extra = " gpipe bf16 rounded route | rounded / float | rounded / torch bf16 |" if a.routes else ""
    print("| model | gpipe float | gpipe bf16 | bf16 / float | torch float32 | torch autocast bf16 | gpipe bf16 / torch bf16 |" + extra)
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if a.routes else ""))
    for model, b in rows:
        line = (f"| {model} | {b['gpipe float']:.0f} | {b['gpipe bf16']:.0f} | {b['gpipe bf16'] / b['gpipe float']:.2f}x "
                f"| {b['torch float']:.0f} | {b['torch bf16']:.0f} | {b['gpipe bf16'] / b['torch bf16']:.2f}x |")
        if a.routes:
            r = b["gpipe bf16 rounded"]
            line += f" {r:.0f} | {r / b['gpipe float']:.2f}x | {r / b['torch bf16']:.2f}x |"
        print(line)


def accuracy(a):
    print("before:", uptime())
    precisions = ["float", "bf16"] + (["fp16"] if a.fp16 else [])
    print("| deck | epochs | " + " | ".join(f"test accuracy {p}" for p in precisions) + " |")
    print("|---|---|" + "---|" * len(precisions))
    for deck in ("inputs/fashion_mnist_mlp.yaml", "inputs/fashion_mnist_cnn.yaml", "inputs/fashion_mnist_vit.yaml"):
        acc = [gpipe(deck, p, [f"training.epochs={a.epochs}", "training.progress_every=0"])["test_accuracy"]
               for p in precisions]
        print(f"| {deck} | {a.epochs} | " + " | ".join(f"{x:.4f}" for x in acc) + " |", flush=True)
    print("after:", uptime())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--models", default="mlp,cnn,vit")
    p.add_argument("--accuracy", action="store_true")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--routes", action="store_true",
                   help="speed: also gpipe bf16 on the rounded route (GPIPE_BF16_ROUTE=rounded), side by side")
    p.add_argument("--train", default=TRAIN, help="the gpipe-train binary (default build/apps/gpipe-train)")
    a = p.parse_args()
    global ARGS
    ARGS = a
    if not os.path.exists(a.train):
        sys.exit(f"{a.train} is not built")
    accuracy(a) if a.accuracy else speed(a)


if __name__ == "__main__":
    main()

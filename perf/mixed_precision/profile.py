#!/usr/bin/python3
"""Where a bf16 (or float) training step of gpipe-train spends its time
(issue 22): `perf record -g` of one process, one thread, M = 1, on the deep
MLP, CNN and ViT decks, each symbol sorted into a category.

    /usr/bin/python3 perf/mixed_precision/profile.py                       # bf16, the three decks
    /usr/bin/python3 perf/mixed_precision/profile.py --precisions float,bf16 --steps 40

Each run: `ONEDNN_JIT_PROFILE=2 perf record -F 2000 -g gpipe-train DECK
--set precision=P --set training.micro_batches=1 ...` (ONEDNN_JIT_PROFILE=2
writes /tmp/perf-PID.map, so oneDNN's JIT kernels appear by name, e.g.
brgemm / conv_fwd / reorder), then `perf report --no-children --sort
dso,symbol`. Prints, per deck and precision, the percentage of the samples
of the training steps (startup -- reading the data set, initialisation,
library loading -- counted apart and left out of the percentages) in each
category below, and the top symbols with --top. perf samples only this
process's CPU time, so the shares hold under load (the absolute time does not).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRAIN = os.path.join(ROOT, "build", "apps", "gpipe-train")
PERF = "/usr/bin/perf"
DECKS = {"mlp": ("inputs/deep_mlp.yaml", 256), "cnn": ("inputs/fashion_mnist_cnn.yaml", 128),
         "vit": ("inputs/fashion_mnist_vit.yaml", 128)}

# (category, test on "dso symbol"), first match wins.
CATEGORIES = [
    ("startup", r"libz\.so|crc32|inflate|gpipe::standardize|::initialize|ld-linux|do_lookup|_dl_|read_idx|"
                r"load_idx|libyaml|YAML::"),
    ("oneDNN matmul (brgemm)", r"brg|matmul|gemm_f32|jit_avx512_core_gemm|sgemm|gemm_bf16"),
    ("oneDNN convolution", r"conv|avx512_core_bf16_(fwd|bwd_data|bwd_weights)_kernel"),
    ("oneDNN reorder", r"reorder|single_blk|jit_uni_reorder|blk_kernel"),
    ("oneDNN other", r"\[JIT\]|libdnnl"),
    ("conversion / rounding (bf16)", r"reduced::round|round_activations|pack_wire|unpack_wire|to_bf16|"
                                     r"round_and_pack|float_to_bf16|bf16_bits"),
    ("optimizer + finiteness check", r"Adam|Sgd|SGD|first_nonfinite|clip|Optimizer|LossScal"),
    ("element-wise layers, norms, softmax", r"Elementwise|Pool2d|LayerNorm|BatchNorm|Dropout|apply_mask|expf|exp|"
                                            r"softmax|Softmax|TokenMean|PosEmbed|PatchEmbed|im2col|add<|Gelu|Relu|"
                                            r"Tanh|Flatten"),
    ("dense layer outside the GEMM", r"Dense<"),
    ("loss", r"Loss|cross_entropy|CrossEntropy"),
    ("kernel (OS)", r"kernel\.kallsyms"),
    ("libc (memcpy, malloc)", r"libc\.so"),
]


def classify(line):
    for name, pattern in CATEGORIES:
        if re.search(pattern, line):
            return name
    return "other"


def profile(a, deck, batch, precision):
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", ONEDNN_JIT_PROFILE="2")
        cmd = [PERF, "record", "-F", "2000", "-g", "-o", data, a.train, os.path.join(ROOT, deck), "--quiet",
               "--set", f"precision={precision}", "--set", "training.micro_batches=1", "--set", "training.epochs=1",
               "--set", f"data.train_limit={a.steps * batch}", "--set", f"data.test_limit={batch}",
               "--set", "training.progress_every=0"]
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = subprocess.run([PERF, "report", "-i", data, "--no-children", "-g", "none", "--sort", "dso,symbol",
                              "--stdio", "-n"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s+([0-9.]+)%\s+([0-9]+)\s+(.*)", line)
        if m:
            rows.append((float(m.group(1)), int(m.group(2)), re.sub(r"\s+", " ", m.group(3)).strip()))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,cnn,vit")
    p.add_argument("--precisions", default="bf16")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--top", type=int, default=0, help="also print the top N symbols of each run")
    p.add_argument("--train", default=TRAIN)
    a = p.parse_args()
    if not os.path.exists(a.train):
        sys.exit(f"{a.train} is not built")
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    runs = []
    for model in a.models.split(","):
        deck, batch = DECKS[model]
        for precision in a.precisions.split(","):
            rows = profile(a, deck, batch, precision)
            cats, samples = {}, {}
            for share, n, sym in rows:
                c = classify(sym)
                cats[c] = cats.get(c, 0.0) + share
                samples[c] = samples.get(c, 0) + n
            runs.append((f"{model} {precision}", cats, rows, samples))
    print("after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    names = [n for n, _ in CATEGORIES if n != "startup"] + ["other"]
    print()
    print("% of the training steps' samples (startup left out: its own % of all samples in the last row)")
    print()
    print("| category | " + " | ".join(r[0] for r in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for n in names:
        vals = []
        for _, cats, _, _ in runs:
            steps = 100.0 - cats.get("startup", 0.0)
            vals.append(f"{100.0 * cats.get(n, 0.0) / steps:.1f}")
        print(f"| {n} | " + " | ".join(vals) + " |")
    print("| (startup, % of all) | " + " | ".join(f"{c.get('startup', 0.0):.1f}" for _, c, _, _ in runs) + " |")
    # CPU milliseconds per training step in each category (2000 samples/s).
    print()
    print(f"CPU ms per training step ({a.steps} steps; perf samples at 2 kHz / steps)")
    print()
    print("| category | " + " | ".join(r[0] for r in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for n in names + ["total (steps)"]:
        vals = []
        for _, _, _, samples in runs:
            k = sum(v for c, v in samples.items() if c != "startup") if n == "total (steps)" else samples.get(n, 0)
            vals.append(f"{k / 2.0 / a.steps:.1f}")
        print(f"| {n} | " + " | ".join(vals) + " |")
    for name, _, rows, _ in runs if a.top else []:
        print(f"\n{name}: top {a.top} symbols")
        for share, _, sym in rows[:a.top]:
            print(f"  {share:6.2f}%  [{classify(sym)}]  {sym[:110]}")


if __name__ == "__main__":
    main()

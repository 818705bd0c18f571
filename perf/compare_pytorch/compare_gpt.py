#!/usr/bin/python3
"""gpipe-kokkos against PyTorch on the character GPT of inputs/kjv_gpt.yaml:
validation loss at the same steps, and tokens/s at 1 process.

Both sides train the same model on the same data in the same order with the
same optimizer for the same steps:

  model     token_embedding (V, d) -> learned positions (T, d) -> L causal
            pre-LN blocks (x + proj(attn(LN(x))), then + W2 GELU_tanh(W1 LN(.)))
            -> [a final LayerNorm (GPT-2's ln_f) when the deck has a layer_norm
            right before its lm_head, as inputs/kjv_gpt_large.yaml does]
            -> lm_head (V, d) without bias; the deck's sizes (--set overrides
            of the deck are applied to both sides)
  data      data/kjv_train.h5 and data/kjv_validation.h5 cut into sequences of
            T + 1 ids exactly as load_hdf5_tokens does; the training order per
            epoch is gpipe's epoch_order (the Fisher-Yates permutation of the
            counter-based SplitMix64 hash of (seed, 3, epoch, i), re-implemented
            here), the validation set the first data.test_limit sequences
  optimizer AdamW (lr, betas, eps, weight decay on every parameter, as gpipe's
            adamw), linear warm-up then cosine, clip_grad_norm_ at clip_norm
  loss      the mean cross-entropy over every token of the mini-batch

Initial values are drawn independently (PyTorch's generator, gpipe's hash)
from the same distributions (embeddings, positions and head uniform with the
deck's widths, Glorot weights, zero biases), so the two validation curves
agree statistically, not bitwise. The check: gpipe-train's validation loss
within 1% of PyTorch's after every epoch.

Speed: tokens/s of the training steps at 1 process, one thread each (the fair
environment of torch_pipeline.py; gpipe-train's figure is its --summary
samples_per_second times T). Prints both curves and a JSON line "RESULT ...".

Precision (--precision float bf16: both, one after the other in one run):
float is fp32 on both sides; bf16 is gpipe's `precision: bf16` (fp32 master
weights and optimizer state, bf16 GEMM/attention operands with fp32
accumulation, bf16 activations) against PyTorch's
torch.autocast('cpu', dtype=torch.bfloat16) around the forward and the loss
(fp32 weights, bf16 matmuls; the loss and the optimizer in fp32), in training
and in validation.

  /usr/bin/python3 perf/compare_pytorch/compare_gpt.py --epochs 2 --train-limit 2048
  /usr/bin/python3 perf/compare_pytorch/compare_gpt.py --epochs 2 --train-limit 1536 --test-limit 128 \
      --precision float bf16
  /usr/bin/python3 perf/compare_pytorch/compare_gpt.py --epochs 1 --train-limit 384 --test-limit 32 \
      --precision float bf16 --repeats 3     # speed on a loaded machine: paired runs
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import torch_pipeline as tp  # noqa: E402  (fair environment; does not import torch)

MASK = (1 << 64) - 1


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def rng_hash(a, b, c=0, d=0):  # gpipe::rng::hash
    h = mix64(a)
    h = mix64(h ^ b)
    h = mix64(h ^ c)
    return mix64(h ^ d)


def epoch_order(samples, seed, epoch, shuffle=True):  # gpipe::epoch_order
    order = list(range(samples))
    if shuffle:
        for i in range(samples - 1, 0, -1):
            j = rng_hash(seed, 3, epoch, i) % (i + 1)
            order[i], order[j] = order[j], order[i]
    return order


def sequences(path, T, limit):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        ids = np.asarray(f["tokens"][:], dtype=np.int64)
    n = (len(ids) - 1) // T
    if limit:
        n = min(n, limit)
    x = ids[: n * T].reshape(n, T)
    y = ids[1 : n * T + 1].reshape(n, T)
    return x, y


def deck_settings(args):
    import yaml  # python3-yaml
    with open(args.deck) as f:
        deck = yaml.safe_load(f)
    for s in args.set:
        key, value = s.split("=", 1)
        node = deck
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = yaml.safe_load(value)
    layers = deck["model"]["layers"]
    blocks = [l for l in layers if l["type"] == "transformer_block"]
    emb = layers[0]
    return {
        "seed": deck.get("seed", 0), "T": int(deck["model"]["input"]), "V": int(emb["vocabulary"]),
        "d": int(emb["width"]), "blocks": len(blocks), "heads": int(blocks[0]["heads"]),
        "hidden": int(blocks[0].get("hidden", 4 * int(emb["width"]))),
        "batch": int(deck["training"]["batch_size"]), "epochs": int(deck["training"]["epochs"]),
        "shuffle": bool(deck["training"].get("shuffle", True)),
        "train_file": deck["data"]["train_file"], "test_file": deck["data"]["test_file"],
        "train_limit": int(deck["data"].get("train_limit", 0)), "test_limit": int(deck["data"].get("test_limit", 0)),
        "lr": float(deck["optimizer"].get("lr", 1e-3)), "wd": float(deck["optimizer"].get("weight_decay", 0)),
        "beta1": float(deck["optimizer"].get("beta1", 0.9)), "beta2": float(deck["optimizer"].get("beta2", 0.999)),
        "eps": float(deck["optimizer"].get("eps", 1e-8)), "warmup": int(deck["optimizer"].get("warmup_steps", 0)),
        "cosine": deck["optimizer"].get("schedule", "constant") == "cosine",
        "clip": float(deck["optimizer"].get("clip_norm", 0)),
        "tied": "tie" in layers[-1],
        # GPT-2's final LayerNorm (ln_f): a layer_norm right before the lm_head
        "ln_f": len(layers) >= 2 and layers[-2]["type"] == "layer_norm",
        "ln_f_eps": float(layers[-2].get("eps", 1e-5)) if len(layers) >= 2 else 1e-5,
    }


def learning_rate(c, step, total):  # gpipe::learning_rate
    w = c["warmup"]
    if w > 0 and step < w:
        return c["lr"] * (step + 1) / w
    if not c["cosine"] or total <= w:
        return c["lr"]
    return c["lr"] * 0.5 * (1 + math.cos(math.pi * (step - w) / (total - w)))


def build_gpt(torch, c):
    nn = torch.nn
    F = torch.nn.functional
    d, T, H = c["d"], c["T"], c["heads"]

    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def glorot(linear):
        nn.init.xavier_uniform_(linear.weight)
        nn.init.zeros_(linear.bias)
        return linear

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = glorot(nn.Linear(d, 3 * d)), glorot(nn.Linear(d, d))
            self.mlp1, self.mlp2 = glorot(nn.Linear(d, c["hidden"])), glorot(nn.Linear(c["hidden"], d))

        def forward(self, x):
            n = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            heads = lambda t: t.view(n, T, H, d // H).transpose(1, 2)  # noqa: E731
            s = heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(d // H)  # (n, H, T, T)
            s = s.masked_fill(causal, float("-inf"))  # token t sees tokens 0..t
            o = torch.softmax(s, dim=-1) @ heads(v)
            x = x + self.proj(o.transpose(1, 2).reshape(n, T, d))
            return x + self.mlp2(F.gelu(self.mlp1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            a = 0.02 * math.sqrt(3)
            self.emb = nn.Embedding(c["V"], d)
            nn.init.uniform_(self.emb.weight, -a, a)
            self.pos = nn.Parameter(torch.empty(T, d).uniform_(-0.02, 0.02))
            self.blocks = nn.Sequential(*[Block() for _ in range(c["blocks"])])
            self.ln_f = nn.LayerNorm(d, eps=c["ln_f_eps"]) if c["ln_f"] else nn.Identity()
            self.head = nn.Linear(d, c["V"], bias=False)
            nn.init.uniform_(self.head.weight, -a, a)
            if c["tied"]:
                self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(self.ln_f(self.blocks(self.emb(ids) + self.pos)))

    return GPT()


def run_torch(c, log, precision="float"):
    torch = tp.configure_process(1)
    import contextlib

    def cast():  # bf16: autocast the forward and the loss (weights, gradients, AdamW stay fp32)
        if precision == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    F = torch.nn.functional
    torch.manual_seed(c["seed"])
    model = build_gpt(torch, c)
    xs, ys = sequences(os.path.join(ROOT, c["train_file"]), c["T"], c["train_limit"])
    vx, vy = sequences(os.path.join(ROOT, c["test_file"]), c["T"], c["test_limit"])
    xs, ys, vx, vy = (torch.from_numpy(a) for a in (xs, ys, vx, vy))
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                            weight_decay=c["wd"])
    N, samples = c["batch"], xs.shape[0]
    per_epoch = samples // N
    total = per_epoch * c["epochs"]
    curve, step, seconds = [], 0, 0.0

    def validate():
        model.eval()
        with torch.no_grad(), cast():
            loss = sum(float(F.cross_entropy(model(vx[i:i + N]).flatten(0, 1), vy[i:i + N].flatten(), reduction="sum"))
                       for i in range(0, vx.shape[0], N))
        model.train()
        return loss / (vx.shape[0] * c["T"])

    for epoch in range(c["epochs"]):
        order = torch.tensor(epoch_order(samples, c["seed"], epoch, c["shuffle"]))
        t0 = time.perf_counter()
        for s in range(per_epoch):
            rows = order[s * N:(s + 1) * N]
            for g in opt.param_groups:
                g["lr"] = learning_rate(c, step, total)
            opt.zero_grad(set_to_none=True)
            with cast():
                loss = F.cross_entropy(model(xs[rows]).flatten(0, 1), ys[rows].flatten())
            loss.backward()
            if c["clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
            opt.step()
            step += 1
        seconds += time.perf_counter() - t0
        curve.append(validate())
        log(f"  pytorch {precision:5s} epoch {epoch + 1}: step {step}, validation loss {curve[-1]:.4f}")
    return {"validation_loss": curve, "tokens_per_second": step * N * c["T"] / seconds, "steps": step,
            "steps_per_epoch": per_epoch, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "precision": precision}


def run_gpipe(args, log, precision="float"):
    env = dict(os.environ)
    env.update(tp.FAIR_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [args.gpipe_train, args.deck, "--summary", summary, "--set", "training.progress_every=0",
               "--set", "checkpoint.directory=" + os.path.join(tmp, "ckpt")]
        for s in args.set:
            cmd += ["--set", s]
        cmd += ["--set", "precision=" + precision]
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        with open(summary) as f:
            j = json.load(f)
    curve = [h["test_loss"] for h in j["history"]]
    for e, v in enumerate(curve):
        log(f"  gpipe   {precision:5s} epoch {e + 1}: validation loss {v:.4f}")
    return {"validation_loss": curve, "tokens_per_second": float(j["samples_per_second"]) * j["tokens_per_sample"],
            "precision": precision}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", "kjv_gpt.yaml"))
    p.add_argument("--gpipe-train", default=os.path.join(ROOT, "build", "apps", "gpipe-train"))
    p.add_argument("--epochs", type=int, help="training.epochs for both sides")
    p.add_argument("--train-limit", type=int, help="data.train_limit (sequences) for both sides")
    p.add_argument("--test-limit", type=int, help="data.test_limit (sequences) for both sides")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE deck override for both sides")
    p.add_argument("--precision", nargs="+", choices=["float", "bf16"], default=["float"],
                   help="float (fp32 both sides) and/or bf16 (gpipe precision: bf16 vs torch.autocast bf16); "
                        "several run one after the other, side by side in one table")
    p.add_argument("--repeats", type=int, default=1,
                   help="run each side this many times, alternating (gpipe, pytorch, gpipe, ...), and quote the "
                        "median tokens/s and the median of the pairs' ratios (for a loaded machine)")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    if any(s.startswith("precision=") for s in a.set):
        p.error("give the precision with --precision, not --set precision=...")
    for key, value in (("training.epochs", a.epochs), ("data.train_limit", a.train_limit),
                       ("data.test_limit", a.test_limit)):
        if value is not None:
            a.set.append(f"{key}={value}")
    c = deck_settings(a)
    log = lambda s: print(s, flush=True)  # noqa: E731
    log(f"compare_gpt: {c['blocks']} blocks, width {c['d']}, context {c['T']}, vocabulary {c['V']}, "
        f"batch {c['batch']}, {c['epochs']} epochs; machine load {os.getloadavg()[0]:.1f}")
    results = {}
    for precision in a.precision:
        runs = []  # gpipe, pytorch, gpipe, pytorch, ...: a pair's ratio sees the same machine load
        for _ in range(a.repeats):
            runs.append((run_gpipe(a, log, precision), run_torch(c, log, precision)))
        g, t = runs[0]
        within = [abs(x - y) / y for x, y in zip(g["validation_loss"], t["validation_loss"])]
        ratios = sorted(x["tokens_per_second"] / y["tokens_per_second"] for x, y in runs)
        median = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        g = dict(g, tokens_per_second=median([x["tokens_per_second"] for x, _ in runs]))
        t = dict(t, tokens_per_second=median([y["tokens_per_second"] for _, y in runs]))
        results[precision] = {"gpipe": g, "pytorch": t, "relative_difference": within,
                              "pair_ratios": ratios, "ratio": median(ratios), "load_average": os.getloadavg()[0]}
    log(f"  precision  epoch  step  gpipe loss  pytorch loss  difference  gpipe tok/s  pytorch tok/s  ratio"
        f"{'  (tok/s: medians of ' + str(a.repeats) + ' runs; ratio: median of the pairs)' if a.repeats > 1 else ''}")
    for precision, r in results.items():
        g, t = r["gpipe"], r["pytorch"]
        for e, (x, y, w) in enumerate(zip(g["validation_loss"], t["validation_loss"], r["relative_difference"])):
            log(f"  {precision:9s}  {e + 1:5d}  {(e + 1) * t['steps_per_epoch']:4d}  {x:10.4f}  {y:12.4f}  "
                f"{100 * w:9.2f}%  {g['tokens_per_second']:11.0f}  {t['tokens_per_second']:13.0f}  "
                f"{r['ratio']:5.2f}")
    log("  (target: validation loss within 1% of PyTorch's at the same step, tokens/s ratio >= 1.0)")
    first = results[a.precision[0]]
    print("RESULT " + json.dumps({**first, "by_precision": results, "settings": c,
                                  "load_average": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()

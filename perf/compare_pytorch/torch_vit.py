#!/usr/bin/python3
"""PyTorch peer of inputs/fashion_mnist_vit.yaml, on CPU, one process.

The same network as the deck (NCHW float32 images [1, 28, 28]): patch
embedding of 7 x 7 patches to 16 tokens of width 64 (a 7 x 7 stride-7
convolution, the same affine map as gpipe's patch_embed), a learned
positional embedding, two pre-LayerNorm Transformer encoder blocks (4 heads
of width 16, GELU MLP of width 128, no dropout:
nn.TransformerEncoderLayer(norm_first=True), as gpipe's transformer_block),
the mean over tokens, LayerNorm, dense 10; trained with AdamW (lr 2e-3,
weight decay 1e-4) on mini-batches of 128 synthetic images (4 distinct
batches cycled), softmax cross-entropy.

``--micro-batches 1`` is PyTorch's plain loop; M > 1 accumulates M
micro-batches per step with the loss of every micro-batch scaled by 1/N (the
deck's M, like for like with gpipe-train on one rank).

Fair conditions as torch_pipeline.py: one thread (torch.set_num_threads(1),
OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1) and glibc malloc thresholds raised.
The RESULT line records ``torch.backends.mkldnn.is_available()``.

Prints one JSON line prefixed ``RESULT ``.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_pipeline as tp  # noqa: E402  (fair environment; does not import torch)

BATCH = 128  # the deck's training.batch_size
CLASSES = 10


WIDTH, TOKENS, HEADS, HIDDEN = 64, 16, 4, 128


def build_vit(torch):
    nn = torch.nn

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(1, WIDTH, 7, stride=7)
            self.pos = nn.Parameter(torch.zeros(1, TOKENS, WIDTH))
            self.blocks = nn.Sequential(*[
                nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=HIDDEN, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
                for _ in range(2)])
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, CLASSES)

        def forward(self, x):
            t = self.patch(x).flatten(2).transpose(1, 2) + self.pos  # (B, 16, 64)
            t = self.blocks(t)
            return self.head(self.norm(t.mean(dim=1)))

    return ViT()


def run(steps, warmup, micro):
    torch = tp.configure_process(1)
    import torch.nn.functional as F
    torch.manual_seed(7)
    model = build_vit(torch)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2.0e-3, weight_decay=1.0e-4)
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(BATCH, 1, 28, 28, generator=g) for _ in range(4)]
    ys = [torch.randint(0, CLASSES, (BATCH,), generator=g) for _ in range(4)]
    rows = tp._split_rows(BATCH, micro)

    def step(i):
        x, y = xs[i % 4], ys[i % 4]
        opt.zero_grad(set_to_none=True)
        if micro == 1:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
        else:
            for xm, ym in zip(x.split(rows), y.split(rows)):
                loss = F.cross_entropy(model(xm), ym, reduction="sum") / BATCH
                loss.backward()
        opt.step()
        return loss

    for i in range(warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step(warmup + i)
    elapsed = time.perf_counter() - t0
    return {"mode": "vit", "processes": 1, "micro_batches": micro, "steps": steps,
            "warmup": warmup, "batch": BATCH, "seconds": elapsed,
            "samples_per_second": steps * BATCH / elapsed, "loss": float(loss),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "mkldnn": bool(torch.backends.mkldnn.is_available())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="timed steps (default 100)")
    p.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    p.add_argument("--micro-batches", type=int, default=1, help="M (default 1: the plain loop)")
    a = p.parse_args(argv)
    print("RESULT " + json.dumps(run(a.steps, a.warmup, a.micro_batches)), flush=True)


if __name__ == "__main__":
    main()

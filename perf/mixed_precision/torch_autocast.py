#!/usr/bin/python3
"""PyTorch peer of the mixed-precision comparison (perf/mixed_precision/run.py).

One process, one thread (the fair environment of
perf/compare_pytorch/torch_pipeline.py), the plain training loop (M = 1) of
one of three models, in float32 or under
``torch.autocast('cpu', dtype=torch.bfloat16)`` (bf16 matmuls and
convolutions, fp32 weights and optimizer state, as gpipe-train's
``precision: bf16``):

* ``mlp``: inputs/deep_mlp.yaml (784 - 8 x Dense 1024 + ReLU - 10), batch 256, Adam lr 2e-4
* ``cnn``: inputs/fashion_mnist_cnn.yaml (perf/compare_pytorch/torch_cnn.py), batch 128, AdamW
* ``vit``: inputs/fashion_mnist_vit.yaml (perf/compare_pytorch/torch_vit.py), batch 128, AdamW

Prints one JSON line prefixed ``RESULT ``.
"""

import argparse
import contextlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "compare_pytorch"))
import torch_pipeline as tp  # noqa: E402
import torch_cnn  # noqa: E402
import torch_vit  # noqa: E402


def run(model_name, dtype, steps, warmup):
    torch = tp.configure_process(1)
    import torch.nn.functional as F
    torch.manual_seed(7)
    g = torch.Generator().manual_seed(7)
    if model_name == "mlp":
        model = tp.build_model(torch)
        batch, shape = tp.BATCH, (tp.INPUT,)
        opt = torch.optim.Adam(model.parameters(), lr=tp.LR)
    else:
        model = torch_cnn.build_cnn(torch) if model_name == "cnn" else torch_vit.build_vit(torch)
        batch, shape = 128, (1, 28, 28)
        opt = torch.optim.AdamW(model.parameters(), lr=2.0e-3, weight_decay=1.0e-4)
    model.train()
    xs = [torch.randn(batch, *shape, generator=g) for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,), generator=g) for _ in range(4)]

    def ctx():
        if dtype == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(i):
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = F.cross_entropy(model(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()
        return loss

    for i in range(warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step(warmup + i)
    elapsed = time.perf_counter() - t0
    return {"model": model_name, "dtype": dtype, "steps": steps, "batch": batch, "seconds": elapsed,
            "samples_per_second": steps * batch / elapsed, "loss": float(loss), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "vit"], required=True)
    p.add_argument("--dtype", choices=["float", "bf16"], default="float")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args(argv)
    print("RESULT " + json.dumps(run(a.model, a.dtype, a.steps, a.warmup)), flush=True)


if __name__ == "__main__":
    main()

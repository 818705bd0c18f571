#!/usr/bin/python3
"""PyTorch peer of gpipe-kokkos' deep MLP benchmark (inputs/deep_mlp.yaml), on CPU.

Two measurements, each printing one JSON line (prefix ``RESULT ``) on stdout:

* ``--mode single``: the plain PyTorch loop on one process: forward, cross-entropy,
  backward, Adam step, batch 256 (with ``--micro-batches M`` > 1: gradient
  accumulation over M micro-batches, for a like-for-like look at gpipe-train's
  M on one rank).
* ``--mode pipeline``: a GPipe fill-drain pipeline over 2 processes written with
  torch.distributed (gloo backend, loopback only, point-to-point isend/irecv):
  the 17-layer list is cut into 2 stages, each mini-batch is split into M
  micro-batches (sizes differ by at most one, the first N mod M larger, like
  gpipe-kokkos' split_batch); every stage runs F(0..M-1) then B(M-1..0),
  parameter gradients accumulate in .grad, the loss of every micro-batch is
  scaled by 1/N (not by its own size), and one Adam step follows per
  mini-batch. Like gpipe-kokkos, every receive of a step is posted before the
  first op and waited for only when its op needs it.

The data are synthetic (random tensors of the right shapes, 4 distinct batches
cycled). Warm-up steps run first; then a fixed number of steps is timed
(``time.perf_counter``; for the pipeline between two barriers, measured on
rank 0).

Fair conditions (compare.py sets them in the environment; when this file is
run by itself they are set here before torch is imported): one BLAS thread per
process (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1 and torch.set_num_threads(1)),
and glibc's malloc told not to return freed buffers to the kernel (mmap and
trim thresholds raised, in the environment and again with mallopt), so
PyTorch's per-step tensors are reused from the heap instead of being
page-faulted in again every step. The number of minor page faults per timed
step is reported to show it.

Importing this module does not import torch (compare.py imports it for the
model description only); torch is imported inside the functions.
"""

import argparse
import ctypes
import json
import os
import resource
import socket
import sys
import time

# ---- the model of inputs/deep_mlp.yaml --------------------------------------------
INPUT = 784
HIDDEN = 1024
DEPTH = 8          # hidden Dense + ReLU pairs
CLASSES = 10
BATCH = 256
LR = 2.0e-4

# glibc: M_MMAP_THRESHOLD may not exceed HEAP_MAX_SIZE/2 = 32 MiB on 64-bit;
# the largest tensor here is a 1024x1024 float weight (4 MiB).
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 4 * 1024 * 1024 * 1024
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

FAIR_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}
MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
}


def layer_spec():
    """The 17 layers as (kind, in, out): 8 x (dense 1024, relu), dense 10."""
    spec, width = [], INPUT
    for _ in range(DEPTH):
        spec.append(("dense", width, HIDDEN))
        spec.append(("relu", HIDDEN, HIDDEN))
        width = HIDDEN
    spec.append(("dense", width, CLASSES))
    return spec


def flops_split(cells=2):
    """Layer counts per cell minimizing the largest cell's forward+backward GEMM
    work (the first layer has no input gradient), as gpipe-kokkos' automatic
    balance would; ReLU counts as a tiny elementwise cost. Only cells=2."""
    if cells != 2:
        raise ValueError("only 2 cells are implemented")
    spec = layer_spec()

    def cost(i, kind, fin, fout):
        if kind == "dense":
            return (2 if i == 0 else 3) * fin * fout
        return fout  # elementwise

    costs = [cost(i, *l) for i, l in enumerate(spec)]
    best = None
    for cut in range(1, len(spec)):
        worst = max(sum(costs[:cut]), sum(costs[cut:]))
        if best is None or worst < best[0]:
            best = (worst, cut)
    return [best[1], len(spec) - best[1]]


def flops_per_sample():
    """Forward + backward FLOPs of one sample (GEMMs only)."""
    total = 0
    for i, (kind, fin, fout) in enumerate(layer_spec()):
        if kind == "dense":
            total += (2 if i == 0 else 3) * 2 * fin * fout
    return total


# ---- process set-up ------------------------------------------------------------
_CONFIGURED = False


def configure_process(threads=1):
    """Before torch is imported: the fair environment, and malloc thresholds."""
    for k, v in FAIR_ENV.items():
        os.environ.setdefault(k, v)
    for k, v in MALLOC_ENV.items():
        os.environ.setdefault(k, v)  # for children; this process: mallopt below
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(MMAP_THRESHOLD))
        libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(min(TRIM_THRESHOLD, 2**31 - 1)))
    except OSError:
        pass
    import torch
    global _CONFIGURED
    if not _CONFIGURED:  # set_num_interop_threads may be called once (a second call aborts)
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        _CONFIGURED = True
    return torch


def blas_info():
    """Which BLAS this process has loaded, and OpenBLAS' core and threads."""
    info = {"libraries": []}
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                low = os.path.basename(path).lower()
                if any(s in low for s in ("blas", "mkl", "lapack", "dnnl", "gomp")) and path not in info["libraries"]:
                    info["libraries"].append(path)
    except OSError:
        pass
    try:
        ob = ctypes.CDLL("libopenblas.so.0")
        ob.openblas_get_corename.restype = ctypes.c_char_p
        ob.openblas_get_config.restype = ctypes.c_char_p
        info["openblas_core"] = ob.openblas_get_corename().decode()
        info["openblas_config"] = ob.openblas_get_config().decode()
        info["openblas_threads"] = ob.openblas_get_num_threads()
    except (OSError, AttributeError):
        info["openblas_core"] = None
    return info


def build_model(torch, layers=None):
    nn = torch.nn
    mods = []
    for kind, fin, fout in layer_spec():
        mods.append(nn.Linear(fin, fout) if kind == "dense" else nn.ReLU(inplace=True))
    if layers is not None:
        mods = mods[layers[0]:layers[1]]
    return nn.Sequential(*mods)


def synthetic_batches(torch, count=4, seed=7):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(BATCH, INPUT, generator=g) for _ in range(count)]
    ys = [torch.randint(0, CLASSES, (BATCH,), generator=g) for _ in range(count)]
    return xs, ys


def make_optimizer(torch, params, foreach, kind="adam"):
    if kind == "sgd":  # --check only: unlike Adam, SGD's step shows a wrongly scaled gradient
        return torch.optim.SGD(params, lr=0.5)
    kw = {"lr": LR}
    if foreach is not None:
        kw["foreach"] = foreach
    return torch.optim.Adam(params, **kw)


def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# ---- one process ---------------------------------------------------------------
def run_single(steps, warmup, foreach=None, params_out=None, kind="adam", micro=1):
    torch = configure_process()
    import torch.nn.functional as F
    torch.manual_seed(7)
    model = build_model(torch)
    opt = make_optimizer(torch, model.parameters(), foreach, kind)
    xs, ys = synthetic_batches(torch)

    rows = _split_rows(BATCH, micro)

    def step(i):
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        opt.zero_grad(set_to_none=True)
        if micro == 1:   # the plain loop
            loss = F.cross_entropy(model(x), y)
            loss.backward()
        else:            # gradient accumulation over micro-batches, loss scaled by 1/N
            for xm, ym in zip(x.split(rows), y.split(rows)):
                loss = F.cross_entropy(model(xm), ym, reduction="sum") / BATCH
                loss.backward()
        opt.step()
        return loss

    for i in range(warmup):
        step(i)
    f0 = minflt()
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step(warmup + i)
    elapsed = time.perf_counter() - t0
    f1 = minflt()
    if params_out is not None:
        params_out.extend(t.detach().clone() for t in model.parameters())
    return {
        "mode": "single", "processes": 1, "micro_batches": micro, "steps": steps, "warmup": warmup,
        "batch": BATCH, "seconds": elapsed,
        "samples_per_second": steps * BATCH / elapsed,
        "minor_faults_per_step": (f1 - f0) / steps,
        "loss": float(loss), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "blas": blas_info(),
    }


# ---- the GEMM-only ceiling ---------------------------------------------------------
def run_gemm(steps, warmup, micro=1):
    """Samples/s if a training step did nothing but its GEMMs (forward y = x W^T,
    backward dW = dy^T x and dx = dy W, none for the first layer's input), in
    micro-batches of N/M rows, on this process' BLAS: the ceiling for any
    implementation of this model on the same BLAS and thread count."""
    torch = configure_process()
    torch.manual_seed(7)
    rows = _split_rows(BATCH, micro)
    dense = [(fin, fout) for kind, fin, fout in layer_spec() if kind == "dense"]
    ws = [torch.randn(fout, fin) * 0.01 for fin, fout in dense]
    xs = {r: [torch.randn(r, fin) for fin, _ in dense] for r in set(rows)}
    dys = {r: [torch.randn(r, fout) for _, fout in dense] for r in set(rows)}
    ys = {r: [torch.empty(r, fout) for _, fout in dense] for r in set(rows)}
    dxs = {r: [torch.empty(r, fin) for fin, _ in dense] for r in set(rows)}
    dws = [torch.empty(fout, fin) for fin, fout in dense]

    def step():
        for r in rows:
            for i, w in enumerate(ws):
                torch.mm(xs[r][i], w.t(), out=ys[r][i])
            for i, w in reversed(list(enumerate(ws))):
                torch.mm(dys[r][i].t(), xs[r][i], out=dws[i])  # (beta = 1 in training; same cost)
                if i > 0:
                    torch.mm(dys[r][i], w, out=dxs[r][i])

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - t0
    return {"mode": "gemm", "processes": 1, "micro_batches": micro, "steps": steps, "warmup": warmup,
            "batch": BATCH, "seconds": elapsed, "samples_per_second": steps * BATCH / elapsed,
            "gflops": steps * BATCH * flops_per_sample() / elapsed / 1e9,
            "minor_faults_per_step": 0.0, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "blas": blas_info()}


# ---- 2-process GPipe pipeline ----------------------------------------------------
def _split_rows(n, m):
    """Micro-batch row counts: sizes differ by at most one, the first n % m larger."""
    return [n // m + (1 if i < n % m else 0) for i in range(m)]


def _pipeline_worker(rank, world, port, split, micro, steps, warmup, foreach, out_path, save=False,
                     kind="adam"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch = configure_process()
    import torch.distributed as dist
    import torch.nn.functional as F
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(7)
    full = build_model(torch)  # same initial weights on both ranks; each keeps its cell
    bounds = [sum(split[:r]) for r in range(world + 1)]
    stage = full[bounds[rank]:bounds[rank + 1]]
    del full
    if rank > 0 and isinstance(stage[0], torch.nn.ReLU):
        stage[0] = torch.nn.ReLU(inplace=False)  # its input is the received leaf tensor
    opt = make_optimizer(torch, stage.parameters(), foreach, kind)
    xs, ys = synthetic_batches(torch)
    rows = _split_rows(BATCH, micro)
    spec = layer_spec()
    width = spec[bounds[1] - 1][2]  # the boundary activation's width
    first, last = rank == 0, rank == world - 1
    # boundary buffers, allocated once
    grad_bufs = [torch.empty(r, width) for r in rows] if first else None
    act_bufs = [torch.empty(r, width) for r in rows] if last else None
    wait_s = [0.0]

    def wait(req):
        t = time.perf_counter()
        req.wait()
        wait_s[0] += time.perf_counter() - t

    def step(i):
        opt.zero_grad(set_to_none=True)
        if first:
            x = xs[i % len(xs)]
            xm = x.split(rows)
            greq = [dist.irecv(grad_bufs[m], src=rank + 1, tag=2 * m + 1) for m in range(micro)]
            outs, sends = [], []
            for m in range(micro):                     # F(0..M-1)
                o = stage(xm[m])
                outs.append(o)
                sends.append(dist.isend(o.detach(), dst=rank + 1, tag=2 * m))
            for m in reversed(range(micro)):           # B(M-1..0)
                wait(greq[m])
                outs[m].backward(grad_bufs[m])
                outs[m] = None
            for s in sends:
                wait(s)
        else:
            y = ys[i % len(ys)]
            ym = y.split(rows)
            areq = [dist.irecv(act_bufs[m], src=rank - 1, tag=2 * m) for m in range(micro)]
            inps, losses, sends = [], [], []
            for m in range(micro):                     # F(0..M-1)
                wait(areq[m])
                inp = act_bufs[m].detach().requires_grad_(True)
                loss = F.cross_entropy(stage(inp), ym[m], reduction="sum") / BATCH
                inps.append(inp)
                losses.append(loss)
            for m in reversed(range(micro)):           # B(M-1..0)
                losses[m].backward()
                sends.append(dist.isend(inps[m].grad, dst=rank - 1, tag=2 * m + 1))
            for s in sends:
                wait(s)
        opt.step()

    for i in range(warmup):
        step(i)
    dist.barrier()
    wait_s[0] = 0.0
    f0 = minflt()
    t0 = time.perf_counter()
    for i in range(steps):
        step(warmup + i)
    busy = time.perf_counter() - t0
    f1 = minflt()
    dist.barrier()
    elapsed = time.perf_counter() - t0
    res = {"rank": rank, "seconds": elapsed, "compute_seconds": busy - wait_s[0],
           "wait_seconds": wait_s[0], "minor_faults_per_step": (f1 - f0) / steps,
           "layers": [bounds[rank], bounds[rank + 1] - 1], "blas": blas_info(),
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    with open(f"{out_path}.{rank}", "w") as f:
        json.dump(res, f)
    if save:
        torch.save([t.detach().clone() for t in stage.parameters()], f"{out_path}.{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pipeline(micro, steps, warmup, split=None, foreach=None, world=2, params_out=None, kind="adam"):
    import tempfile
    configure_process()
    import torch.multiprocessing as mp
    split = list(split) if split else flops_split(world)
    if len(split) != world or sum(split) != len(layer_spec()) or min(split) < 1:
        raise ValueError(f"split {split}: need {world} positive layer counts summing to {len(layer_spec())}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank")
        mp.spawn(_pipeline_worker, nprocs=world, join=True,
                 args=(world, _free_port(), split, micro, steps, warmup, foreach, out,
                       params_out is not None, kind))
        ranks = []
        for r in range(world):
            with open(f"{out}.{r}") as f:
                ranks.append(json.load(f))
            if params_out is not None:
                import torch
                params_out.extend(torch.load(f"{out}.{r}.pt"))
    elapsed = ranks[0]["seconds"]
    return {
        "mode": "pipeline", "processes": world, "micro_batches": micro, "split": split,
        "steps": steps, "warmup": warmup, "batch": BATCH, "seconds": elapsed,
        "samples_per_second": steps * BATCH / elapsed,
        "minor_faults_per_step": max(r["minor_faults_per_step"] for r in ranks),
        "ranks": ranks, "torch": ranks[0]["torch"], "threads": ranks[0]["threads"],
        "blas": ranks[0]["blas"],
    }


def check(steps, foreach):
    ok = True
    for kind in ("sgd", "adam"):
        ref = []
        run_single(steps, 0, foreach, ref, kind)
        torch = configure_process()
        torch.manual_seed(7)
        init = [t.detach().clone() for t in build_model(torch).parameters()]
        moved = max(float((a - b).abs().max()) for a, b in zip(ref, init))
        cases = [("pipeline M=%d" % m, lambda out, m=m: run_pipeline(m, steps, 0, None, foreach,
                                                                     params_out=out, kind=kind))
                 for m in (1, 3, 4)]
        cases.append(("pipeline M=4, split 9|8", lambda out: run_pipeline(4, steps, 0, [9, 8], foreach,
                                                                        params_out=out, kind=kind)))
        cases.append(("1 process, 3 micro-batches",
                      lambda out: run_single(steps, 0, foreach, out, kind, micro=3)))
        for what, run in cases:
            got = []
            run(got)
            diff = max(float((a - b).abs().max()) for a, b in zip(ref, got))
            if kind == "sgd":
                good = len(got) == len(ref) and diff <= 1e-5 * moved
                ok &= good
                verdict = "ok" if good else "FAILED"
            else:  # Adam divides by sqrt(v): a near-zero gradient's rounding can flip a step of ~lr
                far = sum(int(((a - b).abs() > LR / 10).sum()) for a, b in zip(ref, got))
                verdict = "%d of %d weights differ by > lr/10 (information only)" % (
                    far, sum(a.numel() for a in ref))
            print("check %s, %s: %d tensors, max |this - plain loop| = %.3g, the weights moved up to %.3g: %s"
                  % (kind, what, len(got), diff, moved, verdict), flush=True)
    return 0 if ok else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["single", "pipeline", "gemm"], default="single",
                   help="single: the plain loop; pipeline: the 2-process GPipe pipeline; gemm: only the "
                        "GEMMs of a training step (the ceiling on this BLAS) (default single)")
    p.add_argument("--micro-batches", type=int, default=None,
                   help="M: for --mode pipeline (default 4); for --mode single, M > 1 accumulates the "
                        "gradients of M micro-batches before the step (default 1: the plain loop)")
    p.add_argument("--split", default=None,
                   help="layers per stage, e.g. '9 8' (default: the flops balance, %s)" % flops_split())
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps (default 3)")
    p.add_argument("--foreach", choices=["default", "on", "off"], default="default",
                   help="Adam's multi-tensor implementation (default: torch's default)")
    p.add_argument("--check", action="store_true",
                   help="correctness check instead of timing: with SGD, the pipeline's weights after --steps "
                        "steps (no warm-up) must equal the plain loop's up to float rounding, for M = 1, 3, 4 "
                        "(and M = 4 with the split 9|8), "
                        "and so must one process accumulating 3 micro-batches; Adam's differences are shown")
    a = p.parse_args(argv)
    foreach = {"default": None, "on": True, "off": False}[a.foreach]
    if a.check:
        return check(a.steps, foreach)
    if a.micro_batches is None:
        a.micro_batches = 4 if a.mode == "pipeline" else 1
    if a.mode == "single":
        res = run_single(a.steps, a.warmup, foreach, micro=a.micro_batches)
    elif a.mode == "gemm":
        res = run_gemm(a.steps, a.warmup, a.micro_batches)
    else:
        split = [int(s) for s in a.split.replace(",", " ").split()] if a.split else None
        res = run_pipeline(a.micro_batches, a.steps, a.warmup, split, foreach)
    res["foreach"] = a.foreach
    res["env"] = {k: os.environ.get(k) for k in sorted(os.environ)
                  if k.startswith(("OPENBLAS_", "OMP_", "MALLOC_", "GOTO", "MKL_"))}
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    sys.exit(main())

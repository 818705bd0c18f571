"""Code shared by compare_cnn.py / compare_vit.py (the driver: PyTorch and
gpipe-train runs under compare.py's fair conditions, sides alternated
--repeats times, best kept) and torch_cnn.py / torch_vit.py (the PyTorch
training loop on synthetic Fashion-MNIST-shaped batches).

Importing this module does not import torch: torch_pipeline.configure_process
does, inside train().
"""

import json
import os
import shlex
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import compare as cmp  # noqa: E402  (fair environment, child runner, load meter)
import torch_pipeline as tp  # noqa: E402  (fair environment; does not import torch)

BATCH = 128  # the decks' training.batch_size
CLASSES = 10


# ---- the PyTorch side (torch_cnn.py, torch_vit.py) ---------------------------
def train(mode, build, steps, warmup, micro):
    """Trains build(torch) with AdamW (lr 2e-3, weight decay 1e-4) on 4 cycled
    synthetic batches of BATCH images [1, 28, 28]; micro > 1 accumulates micro
    micro-batches per step, each loss scaled by 1/BATCH. Returns the RESULT dict."""
    torch = tp.configure_process(1)
    import torch.nn.functional as F
    torch.manual_seed(7)
    model = build(torch)
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
    return {"mode": mode, "processes": 1, "micro_batches": micro, "steps": steps,
            "warmup": warmup, "batch": BATCH, "seconds": elapsed,
            "samples_per_second": steps * BATCH / elapsed, "loss": float(loss),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "mkldnn": bool(torch.backends.mkldnn.is_available())}


def torch_main(doc, mode, build, argv=None):
    """The command line of torch_cnn.py / torch_vit.py: prints one RESULT line."""
    import argparse
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="timed steps (default 100)")
    p.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    p.add_argument("--micro-batches", type=int, default=1, help="M (default 1: the plain loop)")
    a = p.parse_args(argv)
    print("RESULT " + json.dumps(train(mode, build, a.steps, a.warmup, a.micro_batches)), flush=True)


# ---- the driver (compare_cnn.py, compare_vit.py) -----------------------------
def add_run_args(p, deck):
    """The options both drivers share, before their --kernels."""
    p.add_argument("--torch-steps", type=int, default=80, help="timed PyTorch steps (default 80)")
    p.add_argument("--gpipe-steps", type=int, default=150,
                   help="gpipe-train steps per run (one epoch of this many mini-batches; default 150)")
    p.add_argument("--repeats", type=int, default=2, help="alternate the sides N times (default 2)")
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", deck))
    p.add_argument("--gpipe-train", default=os.path.join(ROOT, "build", "apps", "gpipe-train"))
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--python", default="/usr/bin/python3")


def add_env_args(p):
    """The fair-conditions and output options both drivers share."""
    p.add_argument("--coretype", default=None, help="OPENBLAS_CORETYPE for both sides")
    p.add_argument("--wait-idle", type=float, default=0, metavar="S")
    p.add_argument("--log-dir", default=None)
    p.add_argument("--json", default=None, help="write all results to this JSON file")


def run_torch(args, script, micro):
    """One run of perf/compare_pytorch/<script>.py; its RESULT dict plus foreign_load."""
    cmd = [args.python, os.path.join(HERE, script + ".py"), "--steps", str(args.torch_steps),
           "--warmup", "5", "--micro-batches", str(micro)]
    cmp.wait_idle(args)
    with cmp.ForeignLoad() as fl:
        _, out = cmp.run_child(cmd, cmp.torch_env(args))
    cmp.log(args, "%s M=%d" % (script, micro), out)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["foreign_load"] = fl.cores
            return res
    raise RuntimeError("PyTorch run failed: %s\n%s" % (shlex.join(cmd), out[-3000:]))


def run_gpipe(args, title, ranks, micro, kernels=None):
    """One gpipe-train run of args.deck for args.gpipe_steps mini-batches of BATCH
    (mpirun -n ranks where ranks > 1), GPIPE_KERNELS=kernels unless None; its
    --summary dict plus foreign_load and command. title names the log."""
    env = cmp.base_env(args)
    if kernels is not None:
        env["GPIPE_KERNELS"] = kernels
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [args.gpipe_train, args.deck,
               "--set", "data.train_limit=%d" % (args.gpipe_steps * BATCH),
               "--set", "training.batch_size=%d" % BATCH,
               "--set", "data.test_limit=256", "--set", "training.progress_every=0",
               "--set", "training.epochs=1", "--set", "training.micro_batches=%d" % micro,
               "--summary", summary]
        if ranks > 1:
            launcher = [args.mpirun, "-n", str(ranks), "--bind-to", "none"]
            if os.geteuid() == 0:
                launcher.append("--allow-run-as-root")
            for k in cmp.blas_env_vars(env):
                launcher += ["-x", k]
            if kernels is not None:
                launcher += ["-x", "GPIPE_KERNELS"]
            cmd = launcher + cmd
        cmp.wait_idle(args)
        with cmp.ForeignLoad() as fl:
            rc, out = cmp.run_child(cmd, env, ROOT)
        cmp.log(args, title, out)
        if rc != 0 or not os.path.exists(summary):
            raise RuntimeError("gpipe-train failed (%d): %s\n%s" % (rc, shlex.join(cmd), out[-3000:]))
        with open(summary) as f:
            res = json.load(f)
    res["foreign_load"] = fl.cores
    res["command"] = shlex.join(cmd)
    return res


def best_sps(runs):
    return max(r["samples_per_second"] for r in runs)


def run_rows(args, rows):
    """Runs every (name, fn) of rows --repeats times, alternating, printing each
    run; prints the best-of table against rows[0]. Returns (results, ref)."""
    results = {name: [] for name, _ in rows}
    print("load before: %s; other busy processes: %s" % (cmp.load(), cmp.busy_processes()), flush=True)
    for rep in range(args.repeats):
        for name, fn in rows:
            r = fn()
            results[name].append(r)
            print("  run %d  %-40s %8.1f samples/s  (others used %.2f cores)"
                  % (rep + 1, name, r["samples_per_second"], r["foreign_load"]), flush=True)
    ref = best_sps(results[rows[0][0]])
    print("\n| configuration | samples/s (best of %d) | x PyTorch plain loop |" % args.repeats)
    print("|---|---|---|")
    for name, _ in rows:
        best = best_sps(results[name])
        print("| %s | %.0f | %.2f |" % (name, best, best / ref))
    return results, ref


def finish(args, rows, results):
    """Prints the PyTorch line (version, oneDNN, threads, load after); writes --json."""
    torch0 = results[rows[0][0]][0]
    print("PyTorch %s, oneDNN (mkldnn) available: %s, threads %d; load after: %s"
          % (torch0["torch"], torch0["mkldnn"], torch0["threads"], cmp.load()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)

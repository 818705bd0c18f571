#!/usr/bin/python3
"""gpipe-kokkos against PyTorch on CPU for the ViT of inputs/fashion_mnist_vit.yaml:
samples/s side by side in one run.

Rows (each side alternated --repeats times, best kept, all runs printed):
  PyTorch, 1 process, plain loop (M = 1)           -- the reference
  PyTorch, 1 process, accumulating the deck's M = 8 (like for like)
  gpipe-train, 1 rank, the deck's M = 8, and M = 1
  gpipe-train, 2 ranks (the deck's 2-cell pipeline, M = 8)

Issue 21's targets: gpipe-train at 1 process >= 1.1x PyTorch's plain loop
at M = 1 and at the deck's M = 8; 2 ranks >= 1.6x. --kernels runs gpipe-train
with GPIPE_KERNELS set (e.g. portable, to compare with the oneDNN path). Same fair conditions as compare.py (one BLAS/OpenMP thread per
process, the same OpenBLAS environment; synthetic data for PyTorch, real
Fashion-MNIST for gpipe-train, whose training-only samples/s comes from its
--summary JSON). Run with Debian's /usr/bin/python3 after
`apt-get install python3-torch`.
"""

import argparse
import json
import os
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import compare as cmp  # noqa: E402  (fair environment, child runner, load meter)
import torch_vit as tc  # noqa: E402  (the batch size; does not import torch)


def run_torch(args, micro):
    cmd = [args.python, os.path.join(HERE, "torch_vit.py"), "--steps", str(args.torch_steps),
           "--warmup", "5", "--micro-batches", str(micro)]
    cmp.wait_idle(args)
    with cmp.ForeignLoad() as fl:
        _, out = cmp.run_child(cmd, cmp.torch_env(args))
    cmp.log(args, "torch_vit M=%d" % micro, out)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["foreign_load"] = fl.cores
            return res
    raise RuntimeError("PyTorch run failed: %s\n%s" % (shlex.join(cmd), out[-3000:]))


def run_gpipe(args, ranks, micro):
    env = cmp.base_env(args)
    if args.kernels:
        env["GPIPE_KERNELS"] = args.kernels
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [args.gpipe_train, args.deck,
               "--set", "data.train_limit=%d" % (args.gpipe_steps * tc.BATCH),
               "--set", "training.batch_size=%d" % tc.BATCH,
               "--set", "data.test_limit=256", "--set", "training.progress_every=0",
               "--set", "training.epochs=1", "--set", "training.micro_batches=%d" % micro,
               "--summary", summary]
        if ranks > 1:
            launcher = [args.mpirun, "-n", str(ranks), "--bind-to", "none"]
            if os.geteuid() == 0:
                launcher.append("--allow-run-as-root")
            for k in cmp.blas_env_vars(env):
                launcher += ["-x", k]
            if args.kernels:
                launcher += ["-x", "GPIPE_KERNELS"]
            cmd = launcher + cmd
        cmp.wait_idle(args)
        with cmp.ForeignLoad() as fl:
            rc, out = cmp.run_child(cmd, env, ROOT)
        cmp.log(args, "gpipe_vit ranks=%d M=%d" % (ranks, micro), out)
        if rc != 0 or not os.path.exists(summary):
            raise RuntimeError("gpipe-train failed (%d): %s\n%s" % (rc, shlex.join(cmd), out[-3000:]))
        with open(summary) as f:
            res = json.load(f)
    res["foreign_load"] = fl.cores
    res["command"] = shlex.join(cmd)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch-steps", type=int, default=80, help="timed PyTorch steps (default 80)")
    p.add_argument("--gpipe-steps", type=int, default=150,
                   help="gpipe-train steps per run (one epoch of this many mini-batches; default 150)")
    p.add_argument("--repeats", type=int, default=2, help="alternate the sides N times (default 2)")
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", "fashion_mnist_vit.yaml"))
    p.add_argument("--gpipe-train", default=os.path.join(ROOT, "build", "apps", "gpipe-train"))
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--kernels", default=None, help="GPIPE_KERNELS for gpipe-train (auto, portable, onednn)")
    p.add_argument("--coretype", default=None, help="OPENBLAS_CORETYPE for both sides")
    p.add_argument("--wait-idle", type=float, default=0, metavar="S")
    p.add_argument("--log-dir", default=None)
    p.add_argument("--json", default=None, help="write all results to this JSON file")
    args = p.parse_args(argv)

    rows = [("PyTorch, 1 process, plain loop (M = 1)", lambda: run_torch(args, 1)),
            ("PyTorch, 1 process, M = 8 accumulated", lambda: run_torch(args, 8)),
            ("gpipe-train, 1 rank, M = 8 (deck)", lambda: run_gpipe(args, 1, 8)),
            ("gpipe-train, 1 rank, M = 1", lambda: run_gpipe(args, 1, 1)),
            ("gpipe-train, 2 ranks, M = 8 (deck)", lambda: run_gpipe(args, 2, 8))]
    results = {name: [] for name, _ in rows}
    print("load before: %s; other busy processes: %s" % (cmp.load(), cmp.busy_processes()), flush=True)
    for rep in range(args.repeats):
        for name, fn in rows:
            r = fn()
            results[name].append(r)
            print("  run %d  %-40s %8.1f samples/s  (others used %.2f cores)"
                  % (rep + 1, name, r["samples_per_second"], r["foreign_load"]), flush=True)
    ref = max(r["samples_per_second"] for r in results[rows[0][0]])
    print("\n| configuration | samples/s (best of %d) | x PyTorch plain loop |" % args.repeats)
    print("|---|---|---|")
    for name, _ in rows:
        best = max(r["samples_per_second"] for r in results[name])
        print("| %s | %.0f | %.2f |" % (name, best, best / ref))
    torch0 = results[rows[0][0]][0]
    print("\ngpipe-train kernels: %s" % (args.kernels or "deck (auto)"))
    print("PyTorch %s, oneDNN (mkldnn) available: %s, threads %d; load after: %s"
          % (torch0["torch"], torch0["mkldnn"], torch0["threads"], cmp.load()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

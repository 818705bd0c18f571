#!/usr/bin/python3
"""gpipe-kokkos against PyTorch on CPU for the CNN of inputs/fashion_mnist_cnn.yaml:
samples/s side by side in one run.

Rows (each side alternated --repeats times, best kept, all runs printed):
  PyTorch, 1 process, plain loop (M = 1)           -- the reference
  PyTorch, 1 process, accumulating the deck's M = 8 (like for like)
  gpipe-train, 1 rank, the deck's M = 8, and M = 1
  gpipe-train, 2 ranks (the deck's 2-cell pipeline, M = 8)
the gpipe-train rows once per kernel choice of --kernels (GPIPE_KERNELS:
auto, portable, onednn; default auto).

Targets (issue 21, printed met/missed at the end): gpipe-train >= 1.1x
PyTorch's plain loop at 1 rank, at M = 1 and at the deck's M; >= 1.6x it at
2 ranks. Same fair conditions as compare.py (one BLAS/OpenMP thread per
process, the same OpenBLAS environment; synthetic data for PyTorch, real
Fashion-MNIST for gpipe-train, whose training-only samples/s comes from its
--summary JSON). Run with Debian's /usr/bin/python3 after
`apt-get install python3-torch`.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (the driver shared with compare_vit.py; does not import torch)


def run_torch(args, micro):
    return common.run_torch(args, "torch_cnn", micro)


def run_gpipe(args, ranks, micro, kernels="auto"):
    res = common.run_gpipe(args, "gpipe_cnn ranks=%d M=%d kernels=%s" % (ranks, micro, kernels),
                           ranks, micro, kernels)
    res["command"] = "GPIPE_KERNELS=%s " % kernels + res["command"]
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_run_args(p, "fashion_mnist_cnn.yaml")
    common.add_env_args(p)
    p.add_argument("--kernels", default="auto",
                   help="comma-separated kernel choices for the gpipe-train rows (GPIPE_KERNELS; default auto)")
    args = p.parse_args(argv)

    rows = [("PyTorch, 1 process, plain loop (M = 1)", lambda: run_torch(args, 1)),
            ("PyTorch, 1 process, M = 8 accumulated", lambda: run_torch(args, 8))]
    targets = []  # (row, factor)
    for k in args.kernels.split(","):
        rows += [("gpipe-train %s, 1 rank, M = 8 (deck)" % k, lambda k=k: run_gpipe(args, 1, 8, k)),
                 ("gpipe-train %s, 1 rank, M = 1" % k, lambda k=k: run_gpipe(args, 1, 1, k)),
                 ("gpipe-train %s, 2 ranks, M = 8 (deck)" % k, lambda k=k: run_gpipe(args, 2, 8, k))]
        targets += [(rows[-3][0], 1.1), (rows[-2][0], 1.1), (rows[-1][0], 1.6)]
    results, ref = common.run_rows(args, rows)
    print("\nTargets (x PyTorch plain loop):")
    for name, factor in targets:
        got = common.best_sps(results[name]) / ref
        print("  %-45s >= %.1fx: %.2fx %s" % (name, factor, got, "met" if got >= factor else "MISSED"))
    for name, _ in rows[2:]:
        print("  command: %s" % results[name][0]["command"])
    print()
    common.finish(args, rows, results)


if __name__ == "__main__":
    main()

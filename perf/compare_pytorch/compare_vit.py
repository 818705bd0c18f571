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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (the driver shared with compare_cnn.py; does not import torch)


def run_torch(args, micro):
    return common.run_torch(args, "torch_vit", micro)


def run_gpipe(args, ranks, micro):
    return common.run_gpipe(args, "gpipe_vit ranks=%d M=%d" % (ranks, micro), ranks, micro,
                            args.kernels or None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_run_args(p, "fashion_mnist_vit.yaml")
    p.add_argument("--kernels", default=None, help="GPIPE_KERNELS for gpipe-train (auto, portable, onednn)")
    common.add_env_args(p)
    args = p.parse_args(argv)

    rows = [("PyTorch, 1 process, plain loop (M = 1)", lambda: run_torch(args, 1)),
            ("PyTorch, 1 process, M = 8 accumulated", lambda: run_torch(args, 8)),
            ("gpipe-train, 1 rank, M = 8 (deck)", lambda: run_gpipe(args, 1, 8)),
            ("gpipe-train, 1 rank, M = 1", lambda: run_gpipe(args, 1, 1)),
            ("gpipe-train, 2 ranks, M = 8 (deck)", lambda: run_gpipe(args, 2, 8))]
    results, _ = common.run_rows(args, rows)
    print("\ngpipe-train kernels: %s" % (args.kernels or "deck (auto)"))
    common.finish(args, rows, results)


if __name__ == "__main__":
    main()

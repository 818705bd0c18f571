#!/usr/bin/env python3
"""Write the tiny data set of the emulated decks (inputs/emulated_*.yaml).

usage: scripts/make_emulated_data.py [OUT_DIR] [--train 16384] [--test 256] [--features 16] [--seed 0]

OUT_DIR (default data) gets emulated_train.h5 and emulated_test.h5 with the
datasets "inputs" (N, features) float32, uniform in [-1, 1), and "labels" (N)
int32 in 0..9 (docs/file-formats.md, "Training data"). The values do not
matter: synthetic layers only copy them. What matters is that the first cell
stages few features per sample, so the host-side batch staging (about 3 ms per
step for 1024 Fashion-MNIST images of 784 pixels, on cell 0, between steps)
does not distort the emulated step times.
"""
import argparse
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"make_emulated_data.py: {e}; needs numpy and h5py "
             "(Debian: python3-h5py; try /usr/bin/python3 if python3 is another interpreter)")


def write(path, n, features, rng):
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=rng.uniform(-1, 1, (n, features)).astype(np.float32))
        f.create_dataset("labels", data=rng.integers(0, 10, n).astype(np.int32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default="data")
    ap.add_argument("--train", type=int, default=16384)
    ap.add_argument("--test", type=int, default=256)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if min(a.train, a.test, a.features) < 1:
        sys.exit("make_emulated_data.py: --train, --test and --features must be >= 1")
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    write(os.path.join(a.out, "emulated_train.h5"), a.train, a.features, rng)
    write(os.path.join(a.out, "emulated_test.h5"), a.test, a.features, rng)
    print(f"wrote {a.out}/emulated_train.h5 ({a.train} samples) and {a.out}/emulated_test.h5 ({a.test})")


if __name__ == "__main__":
    main()

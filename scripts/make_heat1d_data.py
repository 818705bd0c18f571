#!/usr/bin/env python3
"""Write a 1-D heat-equation regression study: parameters -> solution field.

usage: scripts/make_heat1d_data.py OUT_DIR [--train 8192] [--test 1024] [--points 32] [--seed 0]

The problem: u_t = alpha u_xx on x in [0, 1], u = 0 at both ends, with the
initial condition u(x, 0) = sum_{k=1..4} a_k sin(k pi x). Its exact solution at
t = 1 is u(x, 1) = sum_k a_k exp(-alpha k^2 pi^2) sin(k pi x). Each sample has

  inputs  (5)       float32: a_1..a_4 uniform in [-1, 1], and 100 alpha with alpha
                    uniform in [0.002, 0.05] (scaled to the amplitudes' range, as
                    data.normalize: standardize pools all features)
  targets (points)  float64: u(x_i, 1) at the interior points x_i = i / (points + 1)

(the map is nonlinear in alpha). OUT_DIR gets heat1d_train.h5 and
heat1d_test.h5 with the datasets "inputs" and "targets" that
inputs/heat1d_surrogate.yaml reads (docs/file-formats.md, "Training data").
"""
import argparse
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"make_heat1d_data.py: {e}; needs numpy and h5py "
             "(Debian: python3-h5py; try /usr/bin/python3 if python3 is another interpreter)")


def samples(n, points, rng):
    a = rng.uniform(-1.0, 1.0, size=(n, 4))
    alpha = rng.uniform(0.002, 0.05, size=(n, 1))
    x = np.arange(1, points + 1) / (points + 1)
    k = np.arange(1, 5)
    decay = np.exp(-alpha * (k * np.pi) ** 2)                  # (n, 4)
    modes = np.sin(np.pi * np.outer(k, x))                      # (4, points)
    u = (a * decay) @ modes                                     # (n, points)
    return np.hstack([a, 100.0 * alpha]).astype(np.float32), u.astype(np.float64)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=8192)
    p.add_argument("--test", type=int, default=1024)
    p.add_argument("--points", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for name, n in (("train", args.train), ("test", args.test)):
        x, y = samples(n, args.points, rng)
        path = os.path.join(args.out_dir, f"heat1d_{name}.h5")
        with h5py.File(path, "w") as f:
            f["inputs"] = x
            f["targets"] = y
            f.attrs["problem"] = "u_t = alpha u_xx, u(x,0) = sum a_k sin(k pi x), targets u(x,1)"
        print(f"{path}: inputs {x.shape} float32, targets {y.shape} float64")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reproduce gpipe's predictions for an MLP from a checkpoint with h5py + numpy.

usage: scripts/predict_numpy.py CHECKPOINT INPUT.h5 [--inputs-dataset inputs]
                                [--compare GPIPE_OUT.h5] [--tolerance 1e-5] [--output OUT.npy]

Reads the layers (/layers/NNN_type) and the normalization (/normalization)
of a gpipe checkpoint (docs/file-formats.md), normalizes the raw inputs as
gpipe-infer does, runs dense / relu / tanh / gelu / dropout
(identity at inference) layers in float64, and de-normalizes regression
outputs. With --compare it checks the result against gpipe-infer's
"predictions" dataset: it exits 1 if the largest difference, relative to
max(1, |prediction|), exceeds --tolerance. See docs/inference.md.
"""
import argparse
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"predict_numpy.py: {e}; needs numpy and h5py (Debian: python3-h5py)")


def predict(checkpoint, x):
    """Outputs (N, outputs) of the model in `checkpoint` for raw inputs x (N, features)."""
    with h5py.File(checkpoint, "r") as f:
        norm = f["normalization"].attrs if "normalization" in f else {}
        scale = float(norm.get("input_scale", 1.0))
        mean = float(norm.get("input_mean", 0.0))
        std = float(norm.get("input_std", 1.0))
        if len(norm.get("input_feature_mean", [])) > 0:   # data.normalize: standardize_per_feature
            mean = np.asarray(norm["input_feature_mean"], dtype=np.float64)
            std = np.asarray(norm["input_feature_std"], dtype=np.float64)
        h = (np.asarray(x, dtype=np.float64) * scale - mean) / std
        for name in sorted(f["layers"]):          # "000_dense", "001_tanh", ...
            kind = name.split("_", 1)[1]
            g = f["layers"][name]
            if kind == "dense":
                h = h @ g["weight"][()].astype(np.float64) + g["bias"][()].astype(np.float64)
            elif kind == "relu":
                h = np.maximum(h, 0.0)
            elif kind == "tanh":
                h = np.tanh(h)
            elif kind == "gelu":   # tanh approximation, as gpipe's gelu
                h = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))
            elif kind == "dropout":
                pass
            else:
                sys.exit(f"predict_numpy.py: layer {name}: this example handles MLP layers only")
        t_mean = np.asarray(norm.get("target_mean", []), dtype=np.float64)
        t_std = np.asarray(norm.get("target_std", []), dtype=np.float64)
        if t_mean.size == h.shape[1]:
            h = h * t_std + t_mean
    return h


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("input")
    p.add_argument("--inputs-dataset", default="inputs")
    p.add_argument("--compare")
    p.add_argument("--tolerance", type=float, default=1e-5)
    p.add_argument("--output")
    a = p.parse_args()
    with h5py.File(a.input, "r") as f:
        x = f[a.inputs_dataset][()]
    y = predict(a.checkpoint, x)
    if a.output:
        np.save(a.output, y)
    if a.compare:
        with h5py.File(a.compare, "r") as f:
            ref = f["predictions"][()].astype(np.float64)
        if ref.shape != y.shape:
            sys.exit(f"predict_numpy.py: shapes differ: gpipe {ref.shape}, numpy {y.shape}")
        err = float(np.max(np.abs(y - ref) / np.maximum(1.0, np.abs(ref))))
        print(f"predict_numpy.py: {y.shape[0]} samples x {y.shape[1]} outputs, "
              f"max relative difference to gpipe {err:.3g} (tolerance {a.tolerance:g})")
        return 0 if err <= a.tolerance else 1
    print(y)
    return 0


if __name__ == "__main__":
    sys.exit(main())

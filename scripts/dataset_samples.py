#!/usr/bin/env python3
"""Prints the number of training samples a deck's data files hold (before
data.train_limit), or 0 if that cannot be told here (no PyYAML, no h5py, a
missing file). The scaling studies use it so that weak scaling never asks for
more samples than the data set holds.

usage: scripts/dataset_samples.py DECK [--set data.KEY=VALUE ...]
"""
import gzip
import struct
import sys


def idx_count(path):
    """Items in an IDX file (gzip or plain): the first dimension of its header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        header = f.read(8)
    if len(header) < 8 or header[0] != 0 or header[1] != 0:
        raise ValueError(f"{path}: not an IDX file")
    return struct.unpack(">I", header[4:8])[0]


def hdf5_count(path, dataset):
    import h5py
    with h5py.File(path, "r") as f:
        return int(f[dataset].shape[0])


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    try:
        import yaml
        with open(args[0]) as f:
            data = (yaml.safe_load(f) or {}).get("data", {}) or {}
        rest = args[1:]
        for i, a in enumerate(rest):  # --set data.KEY=VALUE overrides, as gpipe-train applies them
            if a.startswith("data.") and "=" in a and i > 0 and rest[i - 1] == "--set":
                key, value = a[len("data."):].split("=", 1)
                data[key] = value
        if data.get("format", "idx") == "hdf5":
            n = hdf5_count(data["train_file"], data.get("inputs_dataset", "inputs"))
        else:
            n = idx_count(data["train_labels"])
    except Exception as e:  # unknown here: the caller then relies on gpipe-train's warning
        print(f"dataset_samples.py: {e}", file=sys.stderr)
        n = 0
    print(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())

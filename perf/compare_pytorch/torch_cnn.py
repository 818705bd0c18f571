#!/usr/bin/python3
"""PyTorch peer of inputs/fashion_mnist_cnn.yaml, on CPU, one process.

The same network as the deck (NCHW float32 images [1, 28, 28]):
conv2d 8 (3x3, same) - ReLU - conv2d 16 - ReLU - maxpool 2 - conv2d 32 - ReLU -
maxpool 2 - flatten [1568] - dense 128 - ReLU - dropout 0.3 - dense 10, trained
with AdamW (lr 2e-3, weight decay 1e-4) on mini-batches of 128 synthetic images
(4 distinct batches cycled), softmax cross-entropy.

``--micro-batches 1`` is PyTorch's plain loop; M > 1 accumulates M
micro-batches per step with the loss of every micro-batch scaled by 1/N (the
deck's M, like for like with gpipe-train on one rank).

Fair conditions as torch_pipeline.py: one thread (torch.set_num_threads(1),
OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1) and glibc malloc thresholds raised.
PyTorch runs its convolutions through oneDNN (mkldnn) where the build has it;
the RESULT line records ``torch.backends.mkldnn.is_available()``.

Prints one JSON line prefixed ``RESULT ``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BATCH, CLASSES  # noqa: E402,F401  (the deck's training.batch_size; 10 classes)
import common  # noqa: E402  (the training loop shared with torch_vit.py; does not import torch)


def build_cnn(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(128, CLASSES))


def run(steps, warmup, micro):
    return common.train("cnn", build_cnn, steps, warmup, micro)


def main(argv=None):
    common.torch_main(__doc__, "cnn", build_cnn, argv)


if __name__ == "__main__":
    main()

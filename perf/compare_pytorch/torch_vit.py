#!/usr/bin/python3
"""PyTorch peer of inputs/fashion_mnist_vit.yaml, on CPU, one process.

The same network as the deck (NCHW float32 images [1, 28, 28]): patch
embedding of 7 x 7 patches to 16 tokens of width 64 (a 7 x 7 stride-7
convolution, the same affine map as gpipe's patch_embed), a learned
positional embedding, two pre-LayerNorm Transformer encoder blocks (4 heads
of width 16, GELU MLP of width 128, no dropout:
nn.TransformerEncoderLayer(norm_first=True), as gpipe's transformer_block),
the mean over tokens, LayerNorm, dense 10; trained with AdamW (lr 2e-3,
weight decay 1e-4) on mini-batches of 128 synthetic images (4 distinct
batches cycled), softmax cross-entropy.

``--micro-batches 1`` is PyTorch's plain loop; M > 1 accumulates M
micro-batches per step with the loss of every micro-batch scaled by 1/N (the
deck's M, like for like with gpipe-train on one rank).

Fair conditions as torch_pipeline.py: one thread (torch.set_num_threads(1),
OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1) and glibc malloc thresholds raised.
The RESULT line records ``torch.backends.mkldnn.is_available()``.

Prints one JSON line prefixed ``RESULT ``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BATCH, CLASSES  # noqa: E402,F401  (the deck's training.batch_size; 10 classes)
import common  # noqa: E402  (the training loop shared with torch_cnn.py; does not import torch)


WIDTH, TOKENS, HEADS, HIDDEN = 64, 16, 4, 128


def build_vit(torch):
    nn = torch.nn

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(1, WIDTH, 7, stride=7)
            self.pos = nn.Parameter(torch.zeros(1, TOKENS, WIDTH))
            self.blocks = nn.Sequential(*[
                nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=HIDDEN, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
                for _ in range(2)])
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, CLASSES)

        def forward(self, x):
            t = self.patch(x).flatten(2).transpose(1, 2) + self.pos  # (B, 16, 64)
            t = self.blocks(t)
            return self.head(self.norm(t.mean(dim=1)))

    return ViT()


def run(steps, warmup, micro):
    return common.train("vit", build_vit, steps, warmup, micro)


def main(argv=None):
    common.torch_main(__doc__, "vit", build_vit, argv)


if __name__ == "__main__":
    main()

#!/bin/sh
# Issue 21's 1-process rows against PyTorch, both sides with OpenBLAS'
# SkylakeX kernels (the fair BLAS: perf/compare_pytorch/README.md): the deep
# MLP (PyTorch's plain loop and its M = 8 accumulating loop; gpipe-train on
# 1 rank at the deck's M = 8 and at M = 1) and the ViT (PyTorch's plain
# loop; gpipe-train at M = 8, M = 1 and on 2 ranks). One repeat each; about
# 4 minutes on the 2-core development machine. Extra arguments go to both
# scripts' common options (e.g. --wait-idle 30).
#   sh perf/compare_pytorch/issue21_rows.sh
set -e
cd "$(dirname "$0")/../.."
uptime
/usr/bin/python3 perf/compare_pytorch/compare.py --coretype SkylakeX --repeats 1 --skip-pipeline --skip-ceiling "$@"
/usr/bin/python3 perf/compare_pytorch/compare_vit.py --coretype SkylakeX --repeats 1 "$@"
uptime

"""Row-kernel test case `rw_rows2d_softmax`: softmax over each row, fp16 in and out; a (64, 4) block holds four rows, each row's max and sum folded by a tree along threadIdx.x in its own row of a 2-D shared array."""
from __future__ import annotations

import torch

NAME = "rw_rows2d_softmax"
DESCRIPTION = "softmax over each fp16 row; four rows per (64, 4) block, trees along threadIdx.x in red[ty][tx]"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 8192, "N": 2048, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 10, "N": 301, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rows2d_softmax.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return ((2.0 * torch.randn(shape['M'], shape['N'], generator=g, device=device)).half(),)


def reference(x):
    return torch.softmax(x.float(), dim=1).half()

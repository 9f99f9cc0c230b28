"""Row-kernel test case `rw_classic_unrolled`: the sum of squares of each fp32 row, written as the classic fully unrolled templated reduction (two elements per load, `if (BLOCK >= k)` steps, a volatile last warp)."""
from __future__ import annotations

import torch

NAME = "rw_classic_unrolled"
DESCRIPTION = "sum of squares per fp32 row; templated block size, unrolled `if (BLOCK >= k)` steps, volatile warp tail"
PLATFORM = "cuda"
REFERENCE_NAME = "x.pow(2).sum(1)"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 1000, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "classic_unrolled.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return x.pow(2).sum(dim=1)

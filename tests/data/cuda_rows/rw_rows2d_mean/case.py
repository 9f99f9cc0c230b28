"""Row-kernel test case `rw_rows2d_mean`: each row minus its mean, fp32; four rows per (32, 4) block."""
from __future__ import annotations

import torch

NAME = "rw_rows2d_mean"
DESCRIPTION = "each row minus its mean, fp32; four rows per (32, 4) block"
PLATFORM = "cuda"
REFERENCE_NAME = "x - x.mean(1)"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 7, "N": 99, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rows2d.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return x - x.mean(dim=1, keepdim=True)

"""Row-kernel test case `rw_atomic_mean`: each fp32 row divided by its mean absolute value; the block's sum gathered with atomicAdd on one shared float."""
from __future__ import annotations

import torch

NAME = "rw_atomic_mean"
DESCRIPTION = "x / mean(|x|) per fp32 row; the row's sum through atomicAdd on a shared scalar"
PLATFORM = "cuda"
REFERENCE_NAME = "x / x.abs().mean(1)"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 421, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "atomic_mean.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return x / x.abs().mean(dim=1, keepdim=True)

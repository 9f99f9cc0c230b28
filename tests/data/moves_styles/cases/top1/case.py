"""Audit case `top1`: each row's largest value and its column."""
from __future__ import annotations

import torch

NAME = "top1"
DESCRIPTION = "each row's largest value and its column"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.max"
SHAPES = {"default": {"M": 4097, "N": 32001, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 11, "N": 333, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(_DT[shape["dtype"]]),)


def reference(x: torch.Tensor) -> tuple:
    v, i = torch.max(x, dim=1)
    return v, i


def flops(shape: dict) -> float:
    return float(shape["M"] * shape["N"])


def bytes_moved(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"]

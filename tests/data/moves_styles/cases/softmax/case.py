"""Audit case `softmax`: softmax over the last axis."""
from __future__ import annotations

import torch

NAME = "softmax"
DESCRIPTION = "softmax over the last axis"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"
SHAPES = {"default": {"M": 8191, "N": 1001, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 19, "N": 75, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(_DT[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def flops(shape: dict) -> float:
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]

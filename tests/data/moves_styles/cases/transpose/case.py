"""Audit case `transpose`: out = x^T, contiguous."""
from __future__ import annotations

import torch

NAME = "transpose"
DESCRIPTION = "out = x^T, contiguous"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.Tensor.contiguous"
SHAPES = {"default": {"M": 4095, "N": 8193, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 37, "N": 53, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(_DT[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()


def flops(shape: dict) -> float:
    return 0.0


def bytes_moved(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]

"""Audit case `stencil`: y[i] = 0.25 x[i-1] + 0.5 x[i] + 0.25 x[i+1], zero outside."""
from __future__ import annotations

import torch

NAME = "stencil"
DESCRIPTION = "y[i] = 0.25 x[i-1] + 0.5 x[i] + 0.25 x[i+1], zero outside"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.conv1d"
SHAPES = {"default": {"N": 16777219, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 1001, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], generator=g, device=device).to(_DT[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    w = torch.tensor([[[0.25, 0.5, 0.25]]], dtype=x.dtype, device=x.device)
    return torch.nn.functional.conv1d(x[None, None], w, padding=1)[0, 0]


def flops(shape: dict) -> float:
    return 5.0 * shape["N"]


def bytes_moved(shape: dict) -> float:
    return 8.0 * shape["N"]

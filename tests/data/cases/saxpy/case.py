"""A small test case: out = a * x + y over fp32 vectors (the gate's own fast tests).

Plain Python and torch only, like every case module (docs/INTERFACES.md, "Case modules").
"""
from __future__ import annotations

import torch

NAME = "saxpy"
DESCRIPTION = "out = a * x + y (fp32 vectors, scalar a)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch (a * x + y)"

SHAPES = {"default": {"N": 1 << 24, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 3000, "dtype": "fp32"}}

# fp32 arithmetic with or without a fused multiply-add stays near 1e-7.
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}

EXPERTS = [("saxpy_triton.py", "triton"), ("saxpy_cuda.cu", "cuda")]


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = float(torch.empty(()).uniform_(0.5, 2.0, generator=g))
    x = torch.randn(shape["N"], generator=g).to(device)
    y = torch.randn(shape["N"], generator=g).to(device)
    return (a, x, y)


def reference(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return a * x + y


def flops(shape: dict) -> float:
    return 2.0 * shape["N"]


def bytes_moved(shape: dict) -> float:
    return 12.0 * shape["N"]

"""Audit case `bmm`: C[b] = A[b] @ B[b]."""
from __future__ import annotations

import torch

NAME = "bmm"
DESCRIPTION = "C[b] = A[b] @ B[b]"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.bmm"
SHAPES = {"default": {"B": 8, "M": 1023, "N": 1025, "K": 511, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 3, "M": 37, "N": 29, "K": 45, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DT[shape["dtype"]]
    return (torch.randn(shape["B"], shape["M"], shape["K"], generator=g, device=device).to(dt),
            torch.randn(shape["B"], shape["K"], shape["N"], generator=g, device=device).to(dt))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(a.dtype)


def flops(shape: dict) -> float:
    return 2.0 * shape["B"] * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    return 2.0 * shape["B"] * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"])

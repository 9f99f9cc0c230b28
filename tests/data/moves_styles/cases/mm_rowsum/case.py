"""Audit case `mm_rowsum`: out[m] = sum over n of (A @ B)[m, n], fp16 operands, fp32 sums."""
from __future__ import annotations

import torch

NAME = "mm_rowsum"
DESCRIPTION = "out[m] = sum over n of (A @ B)[m, n], fp16 operands, fp32 sums"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"
SHAPES = {"default": {"M": 2047, "N": 2049, "K": 1023, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 67, "N": 45, "K": 83, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DT[shape["dtype"]]
    return (torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt),
            torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).sum(dim=1)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    return 2.0 * (shape["M"] * shape["K"] + shape["K"] * shape["N"]) + 4.0 * shape["M"]

"""Held-out `mm2048`: C = A @ B at 2048 x 2048 x 2048, bf16 (the square GEMM of a mid-size
model layer; bf16 on the device, fp16 at the interpret tier, which has no bf16).

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "mm2048"
DESCRIPTION = "dense matrix product C = A @ B, 2048^3, bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "cuBLAS via torch.matmul"

SHAPES = {"default": {"M": 2048, "N": 2048, "K": 2048, "dtype": "bf16"}}
# No dimension is a multiple of 32: partial tiles in M, N and K.
SMALL_SHAPES = {"default": {"M": 80, "N": 112, "K": 70, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "matmul_ptrs.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

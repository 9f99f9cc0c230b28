"""Held-out `addmm`: out = bias + A @ B (a linear layer's forward with its bias row broadcast
over the rows), fp16.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "addmm"
DESCRIPTION = "bias + A @ B (bias of shape (N,) broadcast over rows), fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "cuBLAS via torch.addmm"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 2048, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 100, "K": 80, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "addmm_start.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(bias, a, b) in torch.addmm's argument order."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    bias = torch.randn(shape["N"], generator=g, device=device).to(dt)
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (bias, a, b)


def reference(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return torch.addmm(bias.float(), a.float(), b.float()).to(a.dtype)
    return torch.addmm(bias, a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"] + shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * (m * k + k * n + m * n + n))

"""Held-out `add_rmsnorm`: the fused residual add + RMSNorm of a transformer block:
h = x + residual (rounded to the input dtype, as the unfused ops round it), y = rms_norm(h) *
weight; returns (h, y), both of x's dtype, bf16.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "add_rmsnorm"
DESCRIPTION = "fused residual add + RMSNorm, returns (x + residual, normalized), eps 1e-6, bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch add + torch.nn.functional.rms_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 136, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "fused_add_norm.py"
FAMILY = "reduction"
EPS = 1e-6

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(x, residual, weight, eps): x and residual (M, N), weight (N,), eps a float."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    m, n = shape["M"], shape["N"]
    x = torch.randn(m, n, generator=g, device=device).to(dt)
    residual = torch.randn(m, n, generator=g, device=device).to(dt)
    w = (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(dt)
    return (x, residual, w, EPS)


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    import torch.nn.functional as F

    h = x + residual
    if x.device.type == "cpu":
        return h, F.rms_norm(h.float(), (h.shape[-1],), weight.float(), eps).to(h.dtype)
    return h, F.rms_norm(h, (h.shape[-1],), weight, eps)


def flops(shape: dict) -> float:
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (4 * shape["M"] * shape["N"] + shape["N"]))

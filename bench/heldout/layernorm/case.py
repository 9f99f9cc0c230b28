"""Held-out `layernorm`: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim,
fp16 (statistics in fp32, biased variance as torch computes it).

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "layernorm"
DESCRIPTION = "LayerNorm over the last dim of (M, N) with weight and bias, eps 1e-5, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 2048, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 176, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "ln_start.py"
FAMILY = "reduction"
EPS = 1e-5

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(x, weight, bias, eps): x (M, N) normals with a per-row offset, weight and bias (N,)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    m, n = shape["M"], shape["N"]
    x = torch.randn(m, n, generator=g, device=device) + torch.randn(m, 1, generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(n, generator=g, device=device)
    b = 0.1 * torch.randn(n, generator=g, device=device)
    return (x.to(dt), w.to(dt), b.to(dt), EPS)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    import torch.nn.functional as F

    if x.device.type == "cpu":
        return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def flops(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (2 * shape["M"] * shape["N"] + 2 * shape["N"]))

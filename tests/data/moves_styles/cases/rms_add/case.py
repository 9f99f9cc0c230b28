"""Audit case `rms_add`: h = x + r; y = rmsnorm(h) * w; returns (h, y)."""
from __future__ import annotations

import torch

NAME = "rms_add"
DESCRIPTION = "h = x + r; y = rmsnorm(h) * w; returns (h, y)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.rms_norm"
SHAPES = {"default": {"M": 4095, "N": 4097, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 9, "N": 200, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DT[shape["dtype"]]
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt),
            torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt),
            torch.randn(shape["N"], generator=g, device=device).to(dt))


def reference(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple:
    h = x.float() + r.float()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return h.to(x.dtype), y.to(x.dtype)


def flops(shape: dict) -> float:
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]

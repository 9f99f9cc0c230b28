"""Audit case `layernorm`: LayerNorm over the last axis with weight and bias."""
from __future__ import annotations

import torch

NAME = "layernorm"
DESCRIPTION = "LayerNorm over the last axis with weight and bias"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"
SHAPES = {"default": {"M": 4095, "N": 4097, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 13, "N": 300, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DT[shape["dtype"]]
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt),
            torch.randn(shape["N"], generator=g, device=device).to(dt),
            torch.randn(shape["N"], generator=g, device=device).to(dt))


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)


def flops(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"]

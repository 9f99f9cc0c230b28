"""Audit case `w8mm`: C = A @ (W * scale[k // 32]), int8 W with a scale per 32 rows of K and column."""
from __future__ import annotations

import torch

NAME = "w8mm"
DESCRIPTION = "C = A @ (W * scale[k // 32]), int8 W with a scale per 32 rows of K and column"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"
SHAPES = {"default": {"M": 2047, "N": 4097, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 23, "N": 45, "K": 96, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

GROUP = 32


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DT[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    w = torch.randint(-127, 128, (shape["K"], shape["N"]), generator=g, device=device).to(torch.int8)
    s = (torch.rand(shape["K"] // GROUP, shape["N"], generator=g, device=device) / 64).to(dt)
    return (a, w, s)


def reference(a: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    full = w.float() * s.float().repeat_interleave(GROUP, dim=0)
    return (a.float() @ full).to(a.dtype)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["K"] + shape["K"] * shape["N"] + 2.0 * shape["M"] * shape["N"]

"""Style case `mm_outer_sum`: C = A @ B via broadcast multiply + tl.sum (no tl.dot), fp32."""
from __future__ import annotations

import torch

NAME = "mm_outer_sum"
DESCRIPTION = "C = A @ B via broadcast multiply + tl.sum (no tl.dot), fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"

SHAPES = {"default": {"M": 2048, "N": 2048, "K": 1024, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 100, "N": 72, "K": 88, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 2e-3}
EXPERTS: list = []
START = "mm_outer.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a, b):
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

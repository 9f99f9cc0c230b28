"""Style case `mm_ieee_where`: C = A @ B in fp32 with IEEE dot precision, bounds by tl.where."""
from __future__ import annotations

import torch

NAME = "mm_ieee_where"
DESCRIPTION = "C = A @ B in fp32 with IEEE dot precision, bounds by tl.where"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"

SHAPES = {"default": {"M": 2048, "N": 2048, "K": 2048, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 40, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-6}
EXPERTS: list = []
START = "ieee_mm.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # full fp32 products: the kernel asks for IEEE precision, so TF32 would not match it
    return (a.double() @ b.double()).to(a.dtype)


def flops(shape: dict) -> float:
    return 2.0 * shape.get("B", 1) * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape.get("B", 1) * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

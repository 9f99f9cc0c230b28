"""A test case: the gemm workload (experts/gemm) at small sizes that no tile divides.

The interpreter runs every program of a launch in Python, so a gemm kernel with 16-wide tiles
takes tens of seconds per gate at the gemm case's interpret sizes; here a launch has a few
dozen programs, and M, N and K all end in a partial tile (masked loads, clipped stores).
Plain Python and torch only, like every case module (docs/INTERFACES.md, "Case modules").
"""
from __future__ import annotations

import torch

NAME = "gemm_ragged"
DESCRIPTION = "dense matrix product C = A @ B, small sizes with partial tiles"
PLATFORM = "cuda"
REFERENCE_NAME = "torch (fp32 product)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 88, "K": 56, "dtype": "fp16"}}

TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}

EXPERTS: list = []


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g)
    b = torch.randn(shape["K"], shape["N"], generator=g)
    return (a.to(device, dtype), b.to(device, dtype))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(a.dtype)

"""CUDA style case `cu_sum_atomic`: sum of a vector, block trees added with atomicAdd (CuPy RawModule host)."""
from __future__ import annotations

import torch

NAME = "cu_sum_atomic"
DESCRIPTION = "sum of every element of a vector, fp32 (values in [0, 1))"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"N": 67108864, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 5000, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "total_sum.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.rand(shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.sum(x)


def flops(shape: dict) -> float:
    return float(shape["N"])


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["N"])

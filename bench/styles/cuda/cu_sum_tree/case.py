"""CUDA style case `cu_sum_tree`: row sums, a shared-memory tree per row (cuda-python host, the start is the host module)."""
from __future__ import annotations

import torch

NAME = "cu_sum_tree"
DESCRIPTION = "sum of each row of an (M, N) matrix, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 12, "N": 700, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "row_sum.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.sum(x, dim=1)


def flops(shape: dict) -> float:
    return float(shape["M"] * shape["N"])


def bytes_moved(shape: dict) -> float:
    return float(4 * (shape["M"] * shape["N"] + shape["M"]))

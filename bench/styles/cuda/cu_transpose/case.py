"""CUDA style case `cu_transpose`: out-of-place transpose through a padded shared tile (cuda-python host)."""
from __future__ import annotations

import torch

NAME = "cu_transpose"
DESCRIPTION = "transpose of an (M, N) matrix into a new (N, M) one, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "Tensor.t().contiguous()"

SHAPES = {"default": {"M": 8192, "N": 8192, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 40, "N": 72, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "transpose.cu"
FAMILY = "memory"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()


def flops(shape: dict) -> float:
    return 0.0


def bytes_moved(shape: dict) -> float:
    return float(2 * 4 * shape["M"] * shape["N"])

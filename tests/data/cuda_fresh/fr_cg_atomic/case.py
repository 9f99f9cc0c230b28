"""Fresh CUDA style case `fr_cg_atomic`: sum of a vector, fp32; cooperative_groups reduce per warp, atomicAdd of the partials."""
from __future__ import annotations

import torch

NAME = "fr_cg_atomic"
DESCRIPTION = "sum of a vector, fp32; cooperative_groups reduce per warp, atomicAdd of the partials"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"N": 1 << 26, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 3001, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "cg_total.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.sum().reshape(1)


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["N"])

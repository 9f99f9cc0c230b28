"""Fresh CUDA style case `f2_sum_shfl_atomic`: sum of a vector, fp32; grid-stride, __shfl_down_sync warp fold, atomicAdd per warp."""
from __future__ import annotations

import torch

NAME = "f2_sum_shfl_atomic"
DESCRIPTION = "sum of a vector, fp32; grid-stride, __shfl_down_sync warp fold, atomicAdd per warp"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"N": 1 << 26, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 5003, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "sum_shfl.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum().float().reshape(1)


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["N"])

"""Fresh CUDA style case `f2_sum_volatile_warp`: sum of a vector, fp32; two elements a thread first, template block size, the last warp through a volatile pointer, two launches."""
from __future__ import annotations

import torch

NAME = "f2_sum_volatile_warp"
DESCRIPTION = "sum of a vector, fp32; two elements a thread first, template block size, the last warp through a volatile pointer, two launches"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"N": 1 << 26, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 70001, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "reduce6.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum().float().reshape(1)


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["N"])

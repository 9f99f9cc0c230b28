"""Fresh CUDA style case `f2_rowsum_twolevel`: row sums, fp32; warp shuffles, warp totals in shared memory, first warp folds them."""
from __future__ import annotations

import torch

NAME = "f2_rowsum_twolevel"
DESCRIPTION = "row sums, fp32; warp shuffles, warp totals in shared memory, first warp folds them"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum(dim=1)"

SHAPES = {"default": {"R": 8192, "C": 8192, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"R": 9, "C": 1000, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "row_sum2.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum(dim=1).float()


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["R"] * (shape["C"] + 1))

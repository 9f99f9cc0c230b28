"""Fresh CUDA style case `f2_colsum_atomic`: column sums, fp32; a thread a column over a chunk of 64 rows, atomicAdd per chunk."""
from __future__ import annotations

import torch

NAME = "f2_colsum_atomic"
DESCRIPTION = "column sums, fp32; a thread a column over a chunk of 64 rows, atomicAdd per chunk"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum(dim=0)"

SHAPES = {"default": {"R": 8192, "C": 8192, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"R": 150, "C": 200, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "col_sum.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device),)


def reference(a: torch.Tensor) -> torch.Tensor:
    return a.double().sum(dim=0).float()


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["C"] * (shape["R"] + 1))

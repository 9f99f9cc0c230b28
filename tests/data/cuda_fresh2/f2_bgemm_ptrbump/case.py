"""Fresh CUDA style case `f2_bgemm_ptrbump`: batched C[b] = A[b] @ B[b], fp32; batch on blockIdx.z, pointers moved to the batch first."""
from __future__ import annotations

import torch

NAME = "f2_bgemm_ptrbump"
DESCRIPTION = "batched C[b] = A[b] @ B[b], fp32; batch on blockIdx.z, pointers moved to the batch first"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.bmm"

SHAPES = {"default": {"B": 16, "M": 1024, "N": 1024, "K": 1024, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"B": 3, "M": 34, "N": 20, "K": 19, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "bmm_bump.cu"
FAMILY = "gemm"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["B"], shape["M"], shape["K"], generator=g, device=device),
            torch.randn(shape["B"], shape["K"], shape["N"], generator=g, device=device))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() @ b.double()).to(a.dtype)


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["B"] * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

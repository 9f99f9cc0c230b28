"""Style case `bmm_grid3`: C[i] = A[i] @ B[i] over a batch of equal-sized products, bf16.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "bmm_grid3"
DESCRIPTION = "batched matrix product C[i] = A[i] @ B[i], bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "cuBLAS via torch.bmm"

SHAPES = {"default": {"BATCH": 16, "M": 1024, "N": 1024, "K": 1024, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"BATCH": 8, "M": 48, "N": 40, "K": 72, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "bmm3d.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    n_batch = shape["BATCH"]
    a = torch.randn(n_batch, shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(n_batch, shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return torch.bmm(a.float(), b.float()).to(a.dtype)
    return torch.bmm(a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape["BATCH"] * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float(size * shape["BATCH"] * (m * k + k * n + m * n))

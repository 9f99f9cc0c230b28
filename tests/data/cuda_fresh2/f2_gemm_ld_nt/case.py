"""Fresh CUDA style case `f2_gemm_ld_nt`: C = A @ B.T, fp16; B given column-major as (N, K), leading dimensions as arguments."""
from __future__ import annotations

import torch

NAME = "f2_gemm_ld_nt"
DESCRIPTION = "C = A @ B.T, fp16; B given column-major as (N, K), leading dimensions as arguments"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 50, "N": 34, "K": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "hgemm_nt_ld.cu"
FAMILY = "gemm"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["K"], generator=g, device=device).half(),
            torch.randn(shape["N"], shape["K"], generator=g, device=device).half())


def reference(a: torch.Tensor, bt: torch.Tensor) -> torch.Tensor:
    return (a.double() @ bt.double().T).to(a.dtype)


def bytes_moved(shape: dict) -> float:
    return float(2 * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

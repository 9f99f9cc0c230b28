"""Fresh CUDA style case `f2_gemv_warp_float4`: y = A x, fp32; a warp a row, float4 loads, __shfl_xor_sync fold."""
from __future__ import annotations

import torch

NAME = "f2_gemv_warp_float4"
DESCRIPTION = "y = A x, fp32; a warp a row, float4 loads, __shfl_xor_sync fold"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.mv"

SHAPES = {"default": {"R": 16384, "C": 8192, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"R": 37, "C": 260, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gemv4.cu"
FAMILY = "gemv"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device),
            torch.randn(shape["C"], generator=g, device=device))


def reference(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (a.double() @ x.double()).float()


def bytes_moved(shape: dict) -> float:
    return float(4 * (shape["R"] * shape["C"] + shape["C"] + shape["R"]))

"""CUDA style case `nw_float4_rms`: RMSNorm, fp32, rows read and written as float4 through reinterpret_cast, the tree a do-while loop (cuda-python host)."""
from __future__ import annotations

import torch

NAME = "nw_float4_rms"
DESCRIPTION = "RMSNorm over the last dim (a multiple of 4) of an (M, N) matrix with a weight, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "x * rsqrt(mean(x^2) + eps) * w"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 516, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rms_vec4.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)
    return (x, w)


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def flops(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(4 * (2 * shape["M"] * shape["N"] + shape["N"]))

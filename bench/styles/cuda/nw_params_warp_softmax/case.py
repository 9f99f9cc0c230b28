"""CUDA style case `nw_params_warp_softmax`: row softmax, fp32, one warp per row of a (32, 4) block, the arguments a struct passed by value, butterfly shuffles (cuda-python host)."""
from __future__ import annotations

import torch

NAME = "nw_params_warp_softmax"
DESCRIPTION = "softmax over the last dim of an (M, N) matrix, fp32, one warp per row"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 16384, "N": 2048, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 11, "N": 301, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "softmax_params.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (3.0 * torch.randn(shape["M"], shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def flops(shape: dict) -> float:
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["M"] * shape["N"])

"""Fresh CUDA style case `fr_softmax_warp`: softmax over each row, fp32; one warp per row, four rows per block."""
from __future__ import annotations

import torch

NAME = "fr_softmax_warp"
DESCRIPTION = "softmax over each row, fp32; one warp per row, four rows per block"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 16384, "N": 1024, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 10, "N": 201, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "warp_softmax.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (3.0 * torch.randn(shape["M"], shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=1)


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["M"] * shape["N"])

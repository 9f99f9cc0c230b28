"""Fresh CUDA style case `fr_while_absmax`: max of |x| over each row, fp32; a while-loop shared tree, grid-stride over rows."""
from __future__ import annotations

import torch

NAME = "fr_while_absmax"
DESCRIPTION = "max of |x| over each row, fp32; a while-loop shared tree, grid-stride over rows"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.amax"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 9, "N": 301, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "absmax.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.abs().amax(dim=1)


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["M"] * (shape["N"] + 1))

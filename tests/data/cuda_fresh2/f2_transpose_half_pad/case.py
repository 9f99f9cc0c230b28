"""Fresh CUDA style case `f2_transpose_half_pad`: transpose, fp16; a flat padded 64x65 shared tile, strides as arguments."""
from __future__ import annotations

import torch

NAME = "f2_transpose_half_pad"
DESCRIPTION = "transpose, fp16; a flat padded 64x65 shared tile, strides as arguments"
PLATFORM = "cuda"
REFERENCE_NAME = "Tensor.t().contiguous()"

SHAPES = {"default": {"R": 8192, "C": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"R": 70, "C": 131, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "tr_half.cu"
FAMILY = "elementwise"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device).half(),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["R"] * shape["C"])

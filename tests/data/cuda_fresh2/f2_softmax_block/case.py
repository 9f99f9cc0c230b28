"""Fresh CUDA style case `f2_softmax_block`: row softmax, fp32; shared trees halving blockDim.x in dynamic shared memory, three passes over the row."""
from __future__ import annotations

import torch

NAME = "f2_softmax_block"
DESCRIPTION = "row softmax, fp32; shared trees halving blockDim.x in dynamic shared memory, three passes over the row"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"R": 8192, "C": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"R": 7, "C": 1000, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "softmax_blk.cu"
FAMILY = "softmax"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1).float()


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["R"] * shape["C"])

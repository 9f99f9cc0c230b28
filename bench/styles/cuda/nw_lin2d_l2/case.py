"""CUDA style case `nw_lin2d_l2`: L2-normalize each row, fp32; a (32, 8) block whose threads are numbered ty * 32 + tx, one tree over all of them (experts.cudahost host)."""
from __future__ import annotations

import torch

NAME = "nw_lin2d_l2"
DESCRIPTION = "L2-normalize each row, fp32; a 2-D block numbered as one line of threads"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.normalize"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 517, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "l2_lin2d.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x, dim=1)


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["M"] * shape["N"])

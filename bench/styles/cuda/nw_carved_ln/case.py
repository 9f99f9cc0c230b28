"""CUDA style case `nw_carved_ln`: LayerNorm, fp32, two sums in one pass and one tree over two arrays carved from dynamic shared memory (CuPy RawKernel host)."""
from __future__ import annotations

import torch

NAME = "nw_carved_ln"
DESCRIPTION = "LayerNorm over the last dim of an (M, N) matrix, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 7, "N": 611, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "ln_carved.py"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device) + 0.5
    gamma = 1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)
    beta = 0.1 * torch.randn(shape["N"], generator=g, device=device)
    return (x, gamma, beta)


def reference(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5)


def flops(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(4 * (2 * shape["M"] * shape["N"] + 2 * shape["N"]))

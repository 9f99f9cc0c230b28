"""Style case `gelu_bias_where`: y = gelu(x + bias) over an (M, N) matrix, flat, loads clamped by tl.where, fp16."""
from __future__ import annotations

import torch

NAME = "gelu_bias_where"
DESCRIPTION = "y = gelu(x + bias) over an (M, N) matrix, flat, loads clamped by tl.where, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.gelu"

SHAPES = {"default": {"M": 8192, "N": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 9, "N": 333, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "gelu_where.py"
FAMILY = "elementwise"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    b = torch.randn(shape["N"], generator=g, device=device).to(dt)
    return (x, b)


def reference(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.gelu((x.float() + bias.float()), approximate="tanh").to(x.dtype)


def flops(shape: dict) -> float:
    return 10.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * 2 * shape["M"] * shape["N"])

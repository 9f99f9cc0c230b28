"""Style case `lse_reduce_chunks`: row logsumexp over column chunks, (max, sum) pairs merged by tl.reduce, fp32."""
from __future__ import annotations

import torch

NAME = "lse_reduce_chunks"
DESCRIPTION = "row logsumexp over column chunks, (max, sum) pairs merged by tl.reduce, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.logsumexp"

SHAPES = {"default": {"M": 8192, "N": 32768, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 9, "N": 700, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "lse_chunks.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = 3.0 * torch.randn(shape["M"], shape["N"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(x, dim=-1)


def flops(shape: dict) -> float:
    return 3.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape["M"] * shape["N"])

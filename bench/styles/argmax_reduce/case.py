"""Style case `argmax_reduce`: row max and its index through tl.reduce with a custom combine, fp32."""
from __future__ import annotations

import torch

NAME = "argmax_reduce"
DESCRIPTION = "row max and its index through tl.reduce with a custom combine, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.max"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 10, "N": 300, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-6}
EXPERTS: list = []
START = "argmax_rows.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.max(x, dim=1)
    return values, indices


def flops(shape: dict) -> float:
    return 1.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape["M"] * shape["N"])

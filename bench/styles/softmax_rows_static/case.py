"""Style case `softmax_rows_static`: row softmax, several rows per program, bounds by tl.where, fp16."""
from __future__ import annotations

import torch

NAME = "softmax_rows_static"
DESCRIPTION = "row softmax, several rows per program, bounds by tl.where, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 16384, "N": 2048, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 13, "N": 300, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "rows_softmax.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = 4.0 * torch.randn(shape["M"], shape["N"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu":
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
    return torch.softmax(x, dim=-1)


def flops(shape: dict) -> float:
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * 2 * shape["M"] * shape["N"])

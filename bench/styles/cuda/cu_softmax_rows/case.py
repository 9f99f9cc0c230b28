"""CUDA style case `cu_softmax_rows`: row softmax, shared-memory trees for max and sum (load_inline ModelNew host)."""
from __future__ import annotations

import torch

NAME = "cu_softmax_rows"
DESCRIPTION = "softmax over the last dim of an (M, N) matrix, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 8192, "N": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 12, "N": 300, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "softmax_rows.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


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
    return float(2 * _SIZE[shape["dtype"]] * shape["M"] * shape["N"])

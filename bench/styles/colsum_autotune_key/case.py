"""Style case `colsum_autotune_key`: sum over dim 0 of an (M, N) matrix, autotuned on two keys with a pruner, fp32."""
from __future__ import annotations

import torch

NAME = "colsum_autotune_key"
DESCRIPTION = "sum over dim 0 of an (M, N) matrix, autotuned on two keys with a pruner, fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"M": 8192, "N": 8192, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 150, "N": 90, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "colsum.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


def flops(shape: dict) -> float:
    return 1.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape["M"] * shape["N"])

"""Style case `bmm_desc3d`: batched C[b] = A[b] @ B[b] through 3-D tensor descriptors, fp16."""
from __future__ import annotations

import torch

NAME = "bmm_desc3d"
DESCRIPTION = "batched C[b] = A[b] @ B[b] through 3-D tensor descriptors, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.bmm"

SHAPES = {"default": {"B": 16, "M": 1024, "N": 1024, "K": 1024, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 3, "M": 72, "N": 80, "K": 48, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "desc_bmm.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["B"], shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["B"], shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return torch.bmm(a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape.get("B", 1) * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape.get("B", 1) * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

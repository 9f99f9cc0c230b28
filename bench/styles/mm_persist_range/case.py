"""Style case `mm_persist_range`: C = A @ B by a fixed count of programs walking tiles, fp16."""
from __future__ import annotations

import torch

NAME = "mm_persist_range"
DESCRIPTION = "C = A @ B by a fixed count of programs walking tiles, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 136, "N": 72, "K": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "persist_mm.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape.get("B", 1) * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape.get("B", 1) * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

"""CUDA style case `cu_rmsnorm`: RMSNorm, a block tree for the sum of squares (cuda-python host, source in the module)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "cu_rmsnorm"
DESCRIPTION = "RMSNorm over the last dim of an (M, N) matrix with a weight, fp32, eps 1e-6"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.rms_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 10, "N": 520, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rmsnorm.py"
FAMILY = "norm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)
    return (x, w)


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def flops(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(4 * (2 * shape["M"] * shape["N"] + shape["N"]))

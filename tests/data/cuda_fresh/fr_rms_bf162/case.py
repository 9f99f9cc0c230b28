"""Fresh CUDA style case `fr_rms_bf162`: RMSNorm over each row, bf16; bfloat162 loads, shared tree with a shifting stride."""
from __future__ import annotations

import torch

NAME = "fr_rms_bf162"
DESCRIPTION = "RMSNorm over each row, bf16; bfloat162 loads, shared tree with a shifting stride"
PLATFORM = "cuda"
REFERENCE_NAME = "torch rms_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 382, "dtype": "bf16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rms_bf162.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w)


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + 1e-6) * w.float()
    return y.to(x.dtype)


def bytes_moved(shape: dict) -> float:
    return float(2 * _SIZE[shape["dtype"]] * shape["M"] * shape["N"])

"""CUDA style case `cu_layernorm`: LayerNorm with weight and bias, block trees for mean and variance (cudahost host)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "cu_layernorm"
DESCRIPTION = "LayerNorm over the last dim of an (M, N) matrix, bf16, eps 1e-5"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 10, "N": 600, "dtype": "bf16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "layernorm.cu"
FAMILY = "norm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = (torch.randn(shape["M"], shape["N"], generator=g, device=device) + 0.5).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    b = (0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w, b)


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu":
        return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def flops(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(_SIZE[shape["dtype"]] * (2 * shape["M"] * shape["N"] + 2 * shape["N"]))

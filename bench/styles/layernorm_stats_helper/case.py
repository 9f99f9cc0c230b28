"""Style case `layernorm_stats_helper`: LayerNorm whose statistics loop is a @triton.jit helper, fp16."""
from __future__ import annotations

import torch

NAME = "layernorm_stats_helper"
DESCRIPTION = "LayerNorm whose statistics loop is a @triton.jit helper, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 8192, "N": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 7, "N": 600, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "ln_helper.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = (2.0 + torch.randn(shape["M"], shape["N"], generator=g, device=device)).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    b = (0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w, b)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    if x.device.type == "cpu":
        return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), 1e-5).to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def flops(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * 2 * shape["M"] * shape["N"])

"""Style case `layernorm_rows2d`: layer norm over the last dim of (M, N), fp16, several rows per program."""
from __future__ import annotations

import torch

NAME = "layernorm_rows2d"
DESCRIPTION = "layer norm over the last dim of (M, N), fp16, several rows per program"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 1024, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 37, "N": 200, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "ln_rows.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    w = torch.randn(shape["N"], generator=g, device=device).to(dt)
    b = torch.randn(shape["N"], generator=g, device=device).to(dt)
    return (x, w, b)


def reference(x, w, b):
    if x.device.type == "cpu":
        return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def flops(shape: dict) -> float:
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (2 * shape["M"] * shape["N"] + 2 * shape["N"]))

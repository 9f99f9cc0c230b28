"""The `layernorm_bf16` workload: each row of an (M, N) matrix normalized to zero mean and unit
variance, then scaled and shifted per column.

The reference is `torch.nn.functional.layer_norm(x, (N,), weight, bias, eps=1e-5)`. Two row
reductions (the mean, then the variance around it) and a pass that writes the row: a kernel
whose block holds one row keeps that row's latency in each block, so that the rows an SM holds
at once bound its bandwidth.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "layernorm_bf16"
DESCRIPTION = "LayerNorm over the last dim of an (M, N) matrix with weight and bias, bf16, eps 1e-5"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "bf16"}}
# "odd": rows of an odd length (every other row off a 16-byte boundary, a tail in each pass)
SMALL_SHAPES = {
    "default": {"M": 6, "N": 520, "dtype": "bf16"},
    "odd": {"M": 5, "N": 301, "dtype": "bf16"},
}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS = [("layernorm_cuda.cu", "cuda")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = (torch.randn(shape["M"], shape["N"], generator=g, device=device) - 0.3).to(dt)
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

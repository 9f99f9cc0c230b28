"""Style case `nw_trmm_where`: C = tril(A) @ B, fp16; the triangle applied with tl.where after the load."""
from __future__ import annotations

import torch

NAME = "nw_trmm_where"
DESCRIPTION = "triangular product C = tril(A) @ B, the triangle zeroed by tl.where, swapped grid axes, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.tril then torch.matmul"
SHAPES = {"default": {"M": 4096, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 136, "N": 72, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "tri_where.py"
FAMILY = "gemm"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["M"], generator=g, device=device).to(dt)
    b = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a, b):
    if a.device.type == "cpu":
        return (torch.tril(a.float()) @ b.float()).to(a.dtype)
    return torch.matmul(torch.tril(a), b)


def flops(shape):
    m = shape["M"]
    return float(m * (m + 1) * shape["N"])


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    m, n = shape["M"], shape["N"]
    return float(size * (m * (m + 1) // 2 + 2 * m * n))

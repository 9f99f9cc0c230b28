"""Style case `nw_mm_epilogue_helper`: gelu_tanh(A @ B + bias), fp16; the epilogue in @triton.jit helpers."""
from __future__ import annotations

import torch

NAME = "nw_mm_epilogue_helper"
DESCRIPTION = "tanh-gelu(A @ B + bias) with the epilogue in jit helpers, a column-major 1-D grid, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul + bias, gelu(tanh)"
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 100, "K": 64, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "epi_mm.py"
FAMILY = "gemm"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    bias = torch.randn(shape["N"], generator=g, device=device).to(dt)
    return (a, b, bias)


def reference(a, b, bias):
    y = a.float() @ b.float() + bias.float()
    return torch.nn.functional.gelu(y, approximate="tanh").to(a.dtype)


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

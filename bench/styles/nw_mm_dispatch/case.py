"""Style case `nw_mm_dispatch`: C = A @ B, bf16 (fp16 at the small shapes: the interpreter has no bf16); the host picks a skinny or a tiled kernel by M."""
from __future__ import annotations

import torch

NAME = "nw_mm_dispatch"
DESCRIPTION = "matrix product, bf16, two kernels chosen on the host by the row count"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"},
          "skinny": {"M": 8, "N": 8192, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 80, "dtype": "fp16"},
                "skinny": {"M": 6, "N": 100, "K": 72, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "dispatch_mm.py"
FAMILY = "gemm"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a, b):
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return torch.matmul(a, b)


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

"""Style case `mm_residual_defaults`: C = A @ B + R, fp16; tiles only as signature defaults, 64-bit indices."""
from __future__ import annotations
import torch

NAME = "mm_residual_defaults"
DESCRIPTION = "C = A @ B + R (residual), fp16; tiles are signature defaults"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 2048, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 72, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "mm_res.py"
FAMILY = "gemm"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    r = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    return (a, b, r)


def reference(a, b, r):
    if a.device.type == "cpu":
        return (a.float() @ b.float() + r.float()).to(a.dtype)
    return torch.addmm(r, a, b)


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + 2 * shape["M"] * shape["N"]))

"""Style case: split-K GEMM with atomic adds into an fp32 buffer; autotuned with reset_to_zero."""
from __future__ import annotations
import torch

NAME = "splitk_reset_zero"
DESCRIPTION = "C = A @ B, fp16 in, split-K atomics into fp32, @triton.autotune(reset_to_zero=...)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"
SHAPES = {"default": {"M": 512, "N": 512, "K": 16384, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 64, "N": 64, "K": 256, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "splitk.py"
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
        return a.float() @ b.float()
    return torch.matmul(a, b).float()


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"]) + 4 * shape["M"] * shape["N"])

"""Style case: C = A @ W^T in fp32 with tf32 dots; W is (N, K) and each tile is loaded (BN, BK) and tl.trans'ed."""
from __future__ import annotations
import torch

NAME = "mm_tf32_bt"
DESCRIPTION = "C = A @ W^T, fp32 inputs, tf32 tensor cores; W tiles transposed in-kernel"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.linear"
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 64, "N": 96, "K": 80, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 5e-3}
EXPERTS: list = []
START = "linear_tf32.py"
FAMILY = "gemm"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    w = torch.randn(shape["N"], shape["K"], generator=g, device=device).to(dt)
    return (a, w)


def reference(a, w):
    if a.device.type == "cpu":
        return (a.double() @ w.double().t()).to(a.dtype)
    # the kernel multiplies in TF32: so does the reference (cuBLAS's TF32 path)
    torch.backends.cuda.matmul.allow_tf32 = True
    return torch.nn.functional.linear(a, w)


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

"""Style case `gemv_defaults`: y = A @ x, A (M, K) fp16, x (K,)."""
from __future__ import annotations
import torch

NAME = "gemv_defaults"
DESCRIPTION = "matrix-vector product y = A @ x, fp16, tiles are signature defaults"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.mv"
SHAPES = {"default": {"M": 8192, "K": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 70, "K": 300, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gemv.py"
FAMILY = "gemv"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    x = torch.randn(shape["K"], generator=g, device=device).to(dt)
    return (a, x)


def reference(a, x):
    if a.device.type == "cpu":
        return torch.mv(a.float(), x.float()).to(a.dtype)
    return torch.mv(a, x)


def flops(shape):
    return 2.0 * shape["M"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] + shape["M"]))

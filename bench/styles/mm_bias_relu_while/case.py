"""Style case `mm_bias_relu_while`: relu(A @ B + bias), fp16; tile constexprs named X, Y, Z, launched through a config dict."""
from __future__ import annotations

import torch

NAME = "mm_bias_relu_while"
DESCRIPTION = "relu(A @ B + bias), fp16; tile constexprs named X, Y, Z, launched through a config dict"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.relu(torch.addmm)"

SHAPES = {"default": {"M": 4096, "N": 2048, "K": 1024, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 100, "N": 72, "K": 90, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "mm_bias_relu.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    bias = torch.randn(shape["N"], generator=g, device=device).to(dt)
    return (a, b, bias)


def reference(a, b, bias):
    if a.device.type == "cpu":
        return torch.relu(a.float() @ b.float() + bias.float()).to(a.dtype)
    return torch.relu(torch.addmm(bias, a, b))


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"] + shape["N"]))

"""Style case `conv1x1_nhwc`: 1x1 convolution + bias over NHWC activations, written as a GEMM."""
from __future__ import annotations
import torch

NAME = "conv1x1_nhwc"
DESCRIPTION = "1x1 conv + bias, NHWC input (N,H,W,C), weight (F,C), output NHWC, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.linear"
SHAPES = {"default": {"N": 32, "H": 56, "W": 56, "C": 256, "F": 256, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"N": 2, "H": 5, "W": 7, "C": 40, "F": 24, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "conv1x1.py"
FAMILY = "conv"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["N"], shape["H"], shape["W"], shape["C"], generator=g, device=device).to(dt)
    w = (torch.randn(shape["F"], shape["C"], generator=g, device=device) / shape["C"] ** 0.5).to(dt)
    bias = torch.randn(shape["F"], generator=g, device=device).to(dt)
    return (x, w, bias)


def reference(x, w, bias):
    if x.device.type == "cpu":
        return torch.nn.functional.linear(x.float(), w.float(), bias.float()).to(x.dtype)
    return torch.nn.functional.linear(x, w, bias)


def flops(shape):
    return 2.0 * shape["N"] * shape["H"] * shape["W"] * shape["C"] * shape["F"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    p = shape["N"] * shape["H"] * shape["W"]
    return float(size * (p * shape["C"] + shape["F"] * shape["C"] + p * shape["F"] + shape["F"]))

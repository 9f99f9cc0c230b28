"""Style case `conv3x3_nhwc`: 3x3 convolution, stride 1, pad 1, NHWC activations, HWIO weight."""
from __future__ import annotations
import torch

NAME = "conv3x3_nhwc"
DESCRIPTION = "3x3 conv, stride 1, pad 1, x NHWC, w (3,3,C,F), y NHWC, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.conv2d"
SHAPES = {"default": {"N": 16, "H": 56, "W": 56, "C": 128, "F": 128, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"N": 2, "H": 6, "W": 5, "C": 20, "F": 24, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "conv3x3.py"
FAMILY = "conv"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["N"], shape["H"], shape["W"], shape["C"], generator=g, device=device).to(dt)
    w = (torch.randn(3, 3, shape["C"], shape["F"], generator=g, device=device) / (9 * shape["C"]) ** 0.5).to(dt)
    return (x, w)


def reference(x, w):
    xn = x.permute(0, 3, 1, 2)
    wn = w.permute(3, 2, 0, 1)
    if x.device.type == "cpu":
        y = torch.nn.functional.conv2d(xn.float(), wn.float(), padding=1)
        return y.permute(0, 2, 3, 1).contiguous().to(x.dtype)
    return torch.nn.functional.conv2d(xn, wn, padding=1).permute(0, 2, 3, 1).contiguous()


def flops(shape):
    return 2.0 * 9 * shape["N"] * shape["H"] * shape["W"] * shape["C"] * shape["F"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    p = shape["N"] * shape["H"] * shape["W"]
    return float(size * (p * shape["C"] + 9 * shape["F"] * shape["C"] + p * shape["F"]))

"""Held-out `conv2d_nchw`: a 3x3 convolution with stride 2 and padding 1 (a ResNet-style
down-sampling layer), contiguous NCHW input and output, fp16. Logical shapes are PyTorch's
(x: N,C,H,W; w: F,C,R,S; y: N,F,P,Q with P = (H + 2*pad - R) // stride + 1).

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "conv2d_nchw"
DESCRIPTION = "3x3 convolution, stride 2, padding 1, NCHW, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "cuDNN via torch.nn.functional.conv2d (NCHW)"

SHAPES = {"default": {"N": 32, "C": 128, "H": 56, "W": 56, "F": 256, "R": 3, "S": 3,
                      "stride": 2, "pad": 1, "dtype": "fp16"}}
# Odd image size (partial output rows), C and F not multiples of the start kernel's tiles.
SMALL_SHAPES = {"default": {"N": 2, "C": 24, "H": 9, "W": 9, "F": 40, "R": 3, "S": 3,
                            "stride": 2, "pad": 1, "dtype": "fp16"}}
TOLERANCE = {"fp16": 5e-3, "bf16": 1e-2, "fp32": 1e-4}
EXPERTS: list = []
START = "conv_direct.py"
FAMILY = "conv"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def out_size(shape: dict) -> tuple[int, int]:
    p = (shape["H"] + 2 * shape["pad"] - shape["R"]) // shape["stride"] + 1
    q = (shape["W"] + 2 * shape["pad"] - shape["S"]) // shape["stride"] + 1
    return p, q


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(x, w, stride, pad): NCHW activations, weights scaled by 1/sqrt(C*R*S), two ints."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    n, c, h, w, f, r, s = (shape[k] for k in ("N", "C", "H", "W", "F", "R", "S"))
    x = torch.randn(n, c, h, w, generator=g, device=device).to(dt)
    wt = (torch.randn(f, c, r, s, generator=g, device=device) / (c * r * s) ** 0.5).to(dt)
    return (x, wt, int(shape["stride"]), int(shape["pad"]))


def reference(x: torch.Tensor, w: torch.Tensor, stride: int, pad: int) -> torch.Tensor:
    if x.device.type == "cpu":
        return F.conv2d(x.float(), w.float(), stride=stride, padding=pad).to(x.dtype)
    return F.conv2d(x, w, stride=stride, padding=pad)


def flops(shape: dict) -> float:
    p, q = out_size(shape)
    return 2.0 * shape["N"] * p * q * shape["F"] * shape["C"] * shape["R"] * shape["S"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    p, q = out_size(shape)
    n, c, h, w, f, r, s = (shape[k] for k in ("N", "C", "H", "W", "F", "R", "S"))
    return float(size * (n * c * h * w + f * c * r * s + n * f * p * q))

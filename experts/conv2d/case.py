"""The `conv2d` workload: a "same" 2-D convolution, y = conv2d(x, w, stride=1, padding=R//2).

Inputs and output are in channels-last (NHWC) memory layout, the layout in which cuDNN is
fastest on tensor cores; the logical shapes are PyTorch's (x: N,C,H,W; w: F,C,R,S; y: N,F,H,W).
Outputs are compared by value, so a kernel may return any memory layout of the right shape.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "conv2d"
DESCRIPTION = "3x3 convolution, stride 1, 'same' padding, channels-last (implicit GEMM)"
PLATFORM = "cuda"
REFERENCE_NAME = "cuDNN via torch.nn.functional.conv2d (channels-last)"

# C and F are channels in and out; R x S is the filter. Stride is 1 and padding R//2, S//2.
SHAPES = {
    "default": {"N": 8, "C": 64, "H": 56, "W": 56, "F": 128, "R": 3, "S": 3, "dtype": "fp16"},
}
# Sized for the expert's first (interpreted) config, 64x128x64 tiles, so every code path the
# device runs is exercised: "default" is not a multiple of any tile (C=72, F=136, 7x7 image: the
# masked paths, two channel blocks per tap, the second partial); "even" divides every tile (the
# unmasked paths the real shape takes). Both have two tiles in M and in F.
SMALL_SHAPES = {
    "default": {"N": 2, "C": 72, "H": 7, "W": 7, "F": 136, "R": 3, "S": 3, "dtype": "fp16"},
    "even": {"N": 2, "C": 64, "H": 8, "W": 8, "F": 256, "R": 3, "S": 3, "dtype": "fp16"},
}

# Relative-norm error ||out - ref|| / ||ref|| allowed, by output dtype. K = C*R*S terms are
# summed in fp32; the fp16 output rounding (~3e-4) dominates.
TOLERANCE = {"fp16": 5e-3, "fp32": 1e-4}

EXPERTS = [("conv2d_triton.py", "triton")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(x, w): random normal activations and weights scaled by 1/sqrt(C*R*S), channels-last."""
    g = torch.Generator(device=device).manual_seed(seed)  # drawn where the inputs live
    dt = _DTYPES[shape["dtype"]]
    n, c, h, w, f, r, s = (shape[k] for k in ("N", "C", "H", "W", "F", "R", "S"))
    x = torch.randn(n, c, h, w, generator=g, device=device)
    wt = torch.randn(f, c, r, s, generator=g, device=device) / (c * r * s) ** 0.5
    cl = torch.channels_last
    return (
        x.to(device=device, dtype=dt).contiguous(memory_format=cl),
        wt.to(device=device, dtype=dt).contiguous(memory_format=cl),
    )


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    pad = (w.shape[2] // 2, w.shape[3] // 2)
    if x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        # CPU half convolution is slow or missing; fp32 then round, as the GPU path accumulates.
        return F.conv2d(x.float(), w.float(), stride=1, padding=pad).to(x.dtype)
    return F.conv2d(x, w, stride=1, padding=pad)


def flops(shape: dict) -> float:
    n, c, h, w, f, r, s = (shape[k] for k in ("N", "C", "H", "W", "F", "R", "S"))
    return 2.0 * n * h * w * f * c * r * s


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    n, c, h, w, f, r, s = (shape[k] for k in ("N", "C", "H", "W", "F", "R", "S"))
    return float(size * (n * c * h * w + f * c * r * s + n * f * h * w))

"""CUDA style case `cu_conv_igemm`: 3x3 convolution as an implicit GEMM, NCHW (cudahost host)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "cu_conv_igemm"
DESCRIPTION = "2-D convolution, 3x3 filters, stride 1, padding 1, NCHW, bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.conv2d (cuDNN)"

SHAPES = {"default": {"N": 32, "C": 64, "H": 56, "W": 56, "K": 128, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"N": 2, "C": 5, "H": 9, "W": 7, "K": 6, "dtype": "bf16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "conv_igemm.cu"
FAMILY = "conv"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["N"], shape["C"], shape["H"], shape["W"], generator=g, device=device)
    w = torch.randn(shape["K"], shape["C"], 3, 3, generator=g, device=device) / (3.0 * shape["C"] ** 0.5)
    return (x.to(dt), w.to(dt))


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu":
        return F.conv2d(x.float(), w.float(), padding=1).to(x.dtype)
    return F.conv2d(x, w, padding=1)


def flops(shape: dict) -> float:
    return 2.0 * shape["N"] * shape["K"] * shape["H"] * shape["W"] * shape["C"] * 9


def bytes_moved(shape: dict) -> float:
    s = _SIZE[shape["dtype"]]
    return float(s * (shape["N"] * shape["C"] * shape["H"] * shape["W"] + shape["K"] * shape["C"] * 9
                      + shape["N"] * shape["K"] * shape["H"] * shape["W"]))

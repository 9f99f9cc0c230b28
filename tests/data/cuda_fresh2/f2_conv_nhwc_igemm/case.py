"""Fresh CUDA style case `f2_conv_nhwc_igemm`: 3x3 convolution, stride 1, pad 1, fp32; NHWC implicit GEMM with a gathered patch tile."""
from __future__ import annotations

import torch

NAME = "f2_conv_nhwc_igemm"
DESCRIPTION = "3x3 convolution, stride 1, pad 1, fp32; NHWC implicit GEMM with a gathered patch tile"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.conv2d"

SHAPES = {"default": {"N": 32, "C": 64, "H": 56, "W": 56, "K": 64, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 2, "C": 5, "H": 7, "W": 6, "K": 11, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "conv_nhwc.cu"
FAMILY = "conv"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], shape["C"], shape["H"], shape["W"], generator=g, device=device),
            torch.randn(shape["K"], shape["C"], 3, 3, generator=g, device=device))


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.conv2d(x.double(), w.double(), padding=1).float()


def bytes_moved(shape: dict) -> float:
    return float(4 * (shape["N"] * shape["H"] * shape["W"] * (shape["C"] + shape["K"]) + 9 * shape["C"] * shape["K"]))

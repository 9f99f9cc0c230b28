"""Fresh CUDA style case `f2_gemm_alpha_bias`: D = 1.5 A @ B - 0.5 C + bias, fp32; two rows a thread, written over C."""
from __future__ import annotations

import torch

NAME = "f2_gemm_alpha_bias"
DESCRIPTION = "D = 1.5 A @ B - 0.5 C + bias, fp32; two rows a thread, written over C"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.addmm"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 70, "N": 66, "K": 45, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gemm_epilogue.cu"
FAMILY = "gemm"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["K"], generator=g, device=device),
            torch.randn(shape["K"], shape["N"], generator=g, device=device),
            torch.randn(shape["M"], shape["N"], generator=g, device=device),
            torch.randn(shape["N"], generator=g, device=device))


def reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return (1.5 * (a.double() @ b.double()) - 0.5 * c.double() + bias.double()).float()


def bytes_moved(shape: dict) -> float:
    return float(4 * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + 2 * shape["M"] * shape["N"]))

"""The `gemm` workload: C = A @ B.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "gemm"
DESCRIPTION = "dense matrix product C = A @ B"
PLATFORM = "cuda"
REFERENCE_NAME = "cuBLAS via torch.matmul"

# Named variants; the device tier runs every variant of SHAPES, the interpret tier every variant
# of SMALL_SHAPES (which the Triton interpreter on a CPU runs in seconds). The small shape fits
# the expert's first (interpreted) config, 128x256x64 tiles: two tiles in M and in N, the second
# one partial (zero-filled loads, clipped stores), and a K-loop of three iterations.
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 192, "N": 320, "K": 192, "dtype": "fp16"}}

# Relative-norm error ||out - ref|| / ||ref|| allowed, by output dtype.
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}

# Expert kernels, relative to this folder.
EXPERTS = [("gemm_triton.py", "triton"), ("gemm_cuda.cu", "cuda")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    # Drawn where the inputs live: a 4096x4096 draw on the host and its copy cost seconds per gate.
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dtype=dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dtype=dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu" and a.dtype in (torch.float16, torch.bfloat16):
        return (a.float() @ b.float()).to(a.dtype)
    return torch.matmul(a, b)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

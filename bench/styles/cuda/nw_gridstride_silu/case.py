"""CUDA style case `nw_gridstride_silu`: SiLU over a flat fp32 tensor, a fixed grid walking it with a 64-bit grid-stride loop, `__ldg` reads (CuPy RawModule host)."""
from __future__ import annotations

import torch

NAME = "nw_gridstride_silu"
DESCRIPTION = "x * sigmoid(x) over a flat fp32 tensor"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.silu"

SHAPES = {"default": {"N": 1 << 26, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 5003, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "silu_gs.py"
FAMILY = "elementwise"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (4.0 * torch.randn(shape["N"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x)


def flops(shape: dict) -> float:
    return 4.0 * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["N"])

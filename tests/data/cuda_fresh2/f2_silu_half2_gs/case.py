"""Fresh CUDA style case `f2_silu_half2_gs`: silu, fp16; grid-stride loop over __half2 pairs, the odd tail by one thread."""
from __future__ import annotations

import torch

NAME = "f2_silu_half2_gs"
DESCRIPTION = "silu, fp16; grid-stride loop over __half2 pairs, the odd tail by one thread"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.silu"

SHAPES = {"default": {"N": 1 << 26, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"N": 4097, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "silu_h2.cu"
FAMILY = "elementwise"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], generator=g, device=device).half(),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x.float()).half()


def bytes_moved(shape: dict) -> float:
    return float(4 * shape["N"])

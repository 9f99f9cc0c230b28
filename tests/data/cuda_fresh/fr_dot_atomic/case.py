"""Fresh CUDA style case `fr_dot_atomic`: dot product of two vectors, fp32; templated unrolled shared tree, atomicAdd per block."""
from __future__ import annotations

import torch

NAME = "fr_dot_atomic"
DESCRIPTION = "dot product of two vectors, fp32; templated unrolled shared tree, atomicAdd per block"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.dot"

SHAPES = {"default": {"N": 1 << 26, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 5003, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "dot_atomic.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["N"], generator=g, device=device),
            torch.randn(shape["N"], generator=g, device=device))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.dot(a, b).reshape(1)


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["N"])

"""A degenerate-looking test case: the answer is tiny (x * 1e-30), so any absolute tolerance
would accept an all-zeros output; the gate's relative-norm error must not."""
from __future__ import annotations

import torch

NAME = "tiny"
DESCRIPTION = "out = x * 1e-30 (fp32)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch"
SHAPES = {"default": {"N": 1 << 20, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 2048, "dtype": "fp32"}}
TOLERANCE = {"fp32": 1e-5}
EXPERTS: list = []


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(shape["N"], generator=g).to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x * 1e-30

"""A broken test case: its reference ignores the inputs (always zeros), so it cannot tell a
kernel from a constant; the gate must refuse to judge with it."""
from __future__ import annotations

import torch

NAME = "constant"
DESCRIPTION = "out = zeros (input-independent, a bad case)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.zeros_like"
SHAPES = {"default": {"N": 1 << 20, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 2048, "dtype": "fp32"}}
TOLERANCE = {"fp32": 1e-5}
EXPERTS: list = []


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(shape["N"], generator=g).to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)

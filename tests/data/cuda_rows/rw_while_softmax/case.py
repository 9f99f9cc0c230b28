"""Row-kernel test case `rw_while_softmax`: softmax over each row, fp32; the max and the sum each reduced by a shared tree written as a while loop over one stride variable."""
from __future__ import annotations

import torch

NAME = "rw_while_softmax"
DESCRIPTION = "softmax over each row, fp32; max and sum trees as while loops sharing one stride variable"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 517, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "while_softmax.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (2.0 * torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return torch.softmax(x.float(), dim=1)

"""A test case: the gemm workload (experts/gemm, and named so) at small sizes that tiles up to
64 divide, for kernels that assume whole tiles (the naive gemm of the test lineages).

The interpreter runs every program of a launch in Python: a run of gates on a gemm kernel
with 16- or 32-wide tiles at the gemm case's interpret sizes takes minutes, here seconds.
Plain Python and torch only, like every case module (docs/INTERFACES.md, "Case modules").
"""
from __future__ import annotations

import torch

NAME = "gemm"
DESCRIPTION = "dense matrix product C = A @ B, small sizes in whole 64-wide tiles"
PLATFORM = "cuda"
REFERENCE_NAME = "torch (fp32 product)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 64, "N": 128, "K": 128, "dtype": "fp16"}}

TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}

EXPERTS: list = []


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[shape["dtype"]]
    return tuple(torch.randn(rows, cols, generator=g).to(device, dtype)
                 for rows, cols in ((shape["M"], shape["K"]), (shape["K"], shape["N"])))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(a.dtype)

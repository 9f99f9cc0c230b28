"""CUDA style case `nw_tmpl_atomic_rowsum`: row sums, a `template <int BLOCK, typename T>` kernel instantiated explicitly and launched through a templated host wrapper, warp shuffles whose results meet by atomicAdd on a shared float (load_inline ModelNew host)."""
from __future__ import annotations

import torch

NAME = "nw_tmpl_atomic_rowsum"
DESCRIPTION = "sum of each row of an (M, N) fp16 matrix, fp32 result"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 9, "N": 650, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rowsum_tmpl.py"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).half(),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.float().sum(dim=1)


def flops(shape: dict) -> float:
    return float(shape["M"] * shape["N"])


def bytes_moved(shape: dict) -> float:
    return float(2 * shape["M"] * shape["N"] + 4 * shape["M"])

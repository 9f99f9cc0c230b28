"""saxpy with a deliberately slow reference (256 chunked launches), so that an honest kernel is
more than 10x faster: exercises the gate's re-verification of large speedups on a GPU."""
from __future__ import annotations

import torch

NAME = "slowref"
DESCRIPTION = "out = a * x + y, reference in 256 chunks"
PLATFORM = "cuda"
REFERENCE_NAME = "torch, chunked"
SHAPES = {"default": {"N": 1 << 22, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"N": 4096, "dtype": "fp32"}}
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3}
EXPERTS: list = []


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = float(torch.empty(()).uniform_(0.5, 2.0, generator=g))
    return (a, torch.randn(shape["N"], generator=g).to(device), torch.randn(shape["N"], generator=g).to(device))


def reference(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for xs, ys, os_ in zip(x.chunk(256), y.chunk(256), out.chunk(256)):
        torch.mul(xs, a, out=os_)
        os_.add_(ys)
        torch.cuda.synchronize() if x.is_cuda else None
    return out

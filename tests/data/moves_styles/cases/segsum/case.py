"""Audit case `segsum`: sums of the segments of x that offsets delimit."""
from __future__ import annotations

import torch

NAME = "segsum"
DESCRIPTION = "sums of the segments of x that offsets delimit"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.segment_reduce"
SHAPES = {"default": {"S": 20001, "L": 211, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"S": 9, "L": 41, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    # the input shapes depend on the shape alone (the gate refills a set in place); the
    # segments' boundaries are random cut points of S * L elements, so their lengths vary
    g = torch.Generator(device="cpu").manual_seed(seed)
    total = shape["S"] * shape["L"]
    cuts = torch.sort(torch.randint(0, total + 1, (shape["S"] - 1,), generator=g)).values
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.full((1,), total)]).to(torch.int32)
    x = torch.randn(total, generator=g).to(_DT[shape["dtype"]])
    return (x.to(device), offsets.to(device))


def reference(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    c = torch.cat([torch.zeros(1, dtype=torch.float64, device=x.device), torch.cumsum(x.double(), 0)])
    o = offsets.long()
    return (c[o[1:]] - c[o[:-1]]).to(x.dtype)


def flops(shape: dict) -> float:
    return float(shape["S"] * shape["L"])


def bytes_moved(shape: dict) -> float:
    return 4.0 * shape["S"] * shape["L"]

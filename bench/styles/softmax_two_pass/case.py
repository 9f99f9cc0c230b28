"""Style case `softmax_two_pass`: row softmax, fp16, long rows walked in chunks."""
from __future__ import annotations

import torch

NAME = "softmax_two_pass"
DESCRIPTION = "row softmax, fp16, long rows walked in chunks"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"R": 4096, "C": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"R": 7, "C": 300, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "softmax_2pass.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = (3 * torch.randn(shape["R"], shape["C"], generator=g, device=device)).to(_DTYPES[shape["dtype"]])
    return (x,)


def reference(x):
    if x.device.type == "cpu":
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
    return torch.softmax(x, dim=-1)


def flops(shape: dict) -> float:
    return 5.0 * shape["R"] * shape["C"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(2 * size * shape["R"] * shape["C"])

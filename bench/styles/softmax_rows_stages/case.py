"""Style case: row softmax, tutorial-style persistent programs, tl.range(..., num_stages=STAGES) with STAGES a kernel constexpr."""
from __future__ import annotations
import torch

NAME = "softmax_rows_stages"
DESCRIPTION = "softmax over the last dim of (M, N), persistent row programs"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"
SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 29, "N": 100, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "sm_rows.py"
FAMILY = "reduction"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt),)


def reference(x):
    if x.device.type == "cpu":
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
    return torch.softmax(x, dim=-1)


def flops(shape):
    return 5.0 * shape["M"] * shape["N"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * 2 * shape["M"] * shape["N"])

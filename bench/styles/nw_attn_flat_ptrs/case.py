"""Style case `nw_attn_flat_ptrs`: causal attention (B, H, S, D), fp16; a 1-D grid split by // and %, K/V pointers advanced."""
from __future__ import annotations

import math

import torch

NAME = "nw_attn_flat_ptrs"
DESCRIPTION = "causal attention (B, H, S, D), fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention (causal)"

SHAPES = {"default": {"B": 4, "H": 16, "S": 2048, "D": 64, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 1, "H": 2, "S": 80, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "flat_attn.py"
FAMILY = "attention"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    return tuple(torch.randn(*dims, generator=g, device=device).to(dt) for _ in range(3))


def reference(q, k, v):
    if q.device.type == "cpu":
        S, D = q.shape[-2], q.shape[-1]
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def flops(shape: dict) -> float:
    return 2.0 * shape["B"] * shape["H"] * shape["S"] * shape["S"] * shape["D"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])

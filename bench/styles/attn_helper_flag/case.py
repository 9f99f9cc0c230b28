"""Style case `attn_helper_flag`: causal attention (B, H, S, D), fp16, whose key loop lives in a
`@triton.jit` helper that takes the mask as a constexpr flag."""
from __future__ import annotations

import math

import torch

NAME = "attn_helper_flag"
DESCRIPTION = "causal attention (B, H, S, D), fp16; the key loop in a helper with a mask flag"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention (is_causal=True)"

SHAPES = {"default": {"B": 4, "H": 16, "S": 2048, "D": 64, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 1, "H": 2, "S": 200, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "flag_attn.py"
FAMILY = "attention"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    return tuple(torch.randn(*dims, generator=g, device=device).to(dt) for _ in range(3))


def reference(q, k, v):
    if q.device.type == "cpu":
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        s = s.masked_fill(future, float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def flops(shape: dict) -> float:
    """Two products of 2*S*S*D per head, halved by the causal mask."""
    s = shape["S"]
    return 2.0 * shape["B"] * shape["H"] * s * s * shape["D"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])

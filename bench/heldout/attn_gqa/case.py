"""Held-out `attn_gqa`: grouped-query attention forward (causal), as a decoder's prefill runs
it: 32 query heads share 8 key/value heads (query head h reads kv head h // 4), bf16.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "attn_gqa"
DESCRIPTION = "grouped-query causal attention, 32 query heads over 8 kv heads, S 2048, D 128, bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention (enable_gqa), flash back-end"

SHAPES = {"default": {"B": 4, "HQ": 32, "HKV": 8, "S": 2048, "D": 128, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"B": 1, "HQ": 4, "HKV": 2, "S": 72, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gqa_start.py"
FAMILY = "attention"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(q, k, v): q (B, HQ, S, D); k and v (B, HKV, S, D); standard normals."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    b, s, d = shape["B"], shape["S"], shape["D"]
    q = torch.randn(b, shape["HQ"], s, d, generator=g, device=device).to(dt)
    k = torch.randn(b, shape["HKV"], s, d, generator=g, device=device).to(dt)
    v = torch.randn(b, shape["HKV"], s, d, generator=g, device=device).to(dt)
    return (q, k, v)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    if q.device.type == "cpu":
        rep = q.shape[1] // k.shape[1]
        k32 = k.float().repeat_interleave(rep, dim=1)
        v32 = v.float().repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q.float(), k32, v32, is_causal=True).to(q.dtype)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def flops(shape: dict) -> float:
    return 2.0 * shape["B"] * shape["HQ"] * shape["S"] * shape["S"] * shape["D"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    b, s, d = shape["B"], shape["S"], shape["D"]
    return float(size * b * s * d * (2 * shape["HQ"] + 2 * shape["HKV"]))

"""Held-out `attn_causal`: causal multi-head attention forward, softmax(Q K^T / sqrt(D) + mask) V,
bf16, tensors laid out (batch, heads, seq, head_dim) as scaled_dot_product_attention takes them.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "attn_causal"
DESCRIPTION = "causal attention forward, (B, H, S, D) = (4, 32, 2048, 128), bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention, flash back-end"

SHAPES = {"default": {"B": 4, "H": 32, "S": 2048, "D": 128, "dtype": "bf16"}}
# S is not a multiple of 32: the last query and key blocks are partial.
SMALL_SHAPES = {"default": {"B": 1, "H": 2, "S": 80, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "attn_start.py"
FAMILY = "attention"
CAUSAL = True

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(q, k, v): three (B, H, S, D) tensors of standard normals."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    return tuple(torch.randn(dims, generator=g, device=device).to(dt) for _ in range(3))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    if q.device.type == "cpu":
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=CAUSAL).to(q.dtype)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL)


def flops(shape: dict) -> float:
    """Two products of 2*S*S*D per head, half of them under the causal mask."""
    full = 4.0 * shape["B"] * shape["H"] * shape["S"] * shape["S"] * shape["D"]
    return full / 2.0 if CAUSAL else full


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])

"""Style case `attn_window`: sliding-window causal attention (B, H, S, D), fp16."""
from __future__ import annotations

import math

import torch

NAME = "attn_window"
DESCRIPTION = "sliding-window causal attention (B, H, S, D), window W keys, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention with the band as attn_mask"

SHAPES = {"default": {"B": 2, "H": 16, "S": 4096, "D": 64, "W": 512, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 1, "H": 2, "S": 150, "D": 32, "W": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "window_attn.py"
FAMILY = "attention"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    q, k, v = (torch.randn(*dims, generator=g, device=device).to(dt) for _ in range(3))
    return (q, k, v, shape["W"])


def _band(s: int, window: int, device) -> torch.Tensor:
    i = torch.arange(s, device=device)
    return (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)


def reference(q, k, v, window):
    band = _band(q.shape[-2], window, q.device)
    if q.device.type == "cpu":
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~band, float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band)


def flops(shape: dict) -> float:
    """Two products of 2*S*W*D per head over the keys the band keeps (the band's area)."""
    s, w = shape["S"], shape["W"]
    kept = w * s - w * (w - 1) / 2
    return 4.0 * shape["B"] * shape["H"] * kept * shape["D"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])

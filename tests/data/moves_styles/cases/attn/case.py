"""Audit case `attn`: non-causal attention softmax(Q K^T / sqrt(D)) V over (B, H, S, D)."""
from __future__ import annotations

import torch

NAME = "attn"
DESCRIPTION = "non-causal attention softmax(Q K^T / sqrt(D)) V over (B, H, S, D)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.scaled_dot_product_attention"
SHAPES = {"default": {"B": 4, "H": 16, "S": 1023, "D": 64, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 1, "H": 2, "S": 37, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DT[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    return tuple(torch.randn(*dims, generator=g, device=device).to(dt) for _ in range(3))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if q.device.type == "cpu":
        s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
        return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def flops(shape: dict) -> float:
    return 4.0 * shape["B"] * shape["H"] * shape["S"] ** 2 * shape["D"]


def bytes_moved(shape: dict) -> float:
    return 8.0 * shape["B"] * shape["H"] * shape["S"] * shape["D"]

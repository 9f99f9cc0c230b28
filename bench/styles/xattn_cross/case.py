"""Style case `xattn_cross`: non-causal cross attention, Sq != Skv, (B, H, S, D) fp16."""
from __future__ import annotations
import torch

NAME = "xattn_cross"
DESCRIPTION = "softmax(Q K^T / sqrt(D)) V, Q (B,H,Sq,D), K/V (B,H,Skv,D), non-causal, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.scaled_dot_product_attention"
SHAPES = {"default": {"B": 4, "H": 16, "SQ": 2048, "SKV": 1024, "D": 64, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 1, "H": 2, "SQ": 40, "SKV": 24, "D": 16, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "xattn.py"
FAMILY = "attention"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    B, H, SQ, SKV, D = shape["B"], shape["H"], shape["SQ"], shape["SKV"], shape["D"]
    q = torch.randn(B, H, SQ, D, generator=g, device=device).to(dt)
    k = torch.randn(B, H, SKV, D, generator=g, device=device).to(dt)
    v = torch.randn(B, H, SKV, D, generator=g, device=device).to(dt)
    return (q, k, v)


def reference(q, k, v):
    if q.device.type == "cpu":
        s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
        return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def flops(shape):
    return 4.0 * shape["B"] * shape["H"] * shape["SQ"] * shape["SKV"] * shape["D"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape["B"] * shape["H"] * shape["D"] * (2 * shape["SQ"] + 2 * shape["SKV"]))

"""Style case `attn_grid_bht`: non-causal attention, grid (batch, head, query tile), keep_dims statistics, fp16."""
from __future__ import annotations

import torch

NAME = "attn_grid_bht"
DESCRIPTION = "non-causal attention, grid (batch, head, query tile), keep_dims statistics, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.scaled_dot_product_attention"

SHAPES = {"default": {"B": 4, "H": 16, "S": 2048, "D": 64, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"B": 2, "H": 2, "S": 80, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "attn_bht.py"
FAMILY = "attention"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    q, k, v = (torch.randn(*dims, generator=g, device=device).to(dt) for _ in range(3))
    return (q, k, v)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    if q.device.type == "cpu":
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v)


def flops(shape: dict) -> float:
    return 4.0 * shape["B"] * shape["H"] * shape["S"] * shape["S"] * shape["D"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])


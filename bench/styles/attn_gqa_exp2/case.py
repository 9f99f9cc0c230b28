"""Style case: causal GQA attention with exp2 and a pre-multiplied log2(e) scale; kv head = q head // (HQ // HKV) from runtime ints."""
from __future__ import annotations
import torch

NAME = "attn_gqa_exp2"
DESCRIPTION = "causal grouped-query attention, exp2 softmax, 3-D grid"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention"
SHAPES = {"default": {"B": 2, "HQ": 32, "HKV": 8, "S": 4096, "D": 128, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"B": 1, "HQ": 4, "HKV": 2, "S": 80, "D": 32, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gqa_exp2.py"
FAMILY = "attention"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    b, s, d = shape["B"], shape["S"], shape["D"]
    q = torch.randn(b, shape["HQ"], s, d, generator=g, device=device).to(dt)
    k = torch.randn(b, shape["HKV"], s, d, generator=g, device=device).to(dt)
    v = torch.randn(b, shape["HKV"], s, d, generator=g, device=device).to(dt)
    return (q, k, v)


def reference(q, k, v):
    import torch.nn.functional as F
    rep = q.shape[1] // k.shape[1]
    if q.device.type == "cpu":
        k32 = k.float().repeat_interleave(rep, dim=1)
        v32 = v.float().repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q.float(), k32, v32, is_causal=True).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def flops(shape):
    return 2.0 * shape["B"] * shape["HQ"] * shape["S"] * shape["S"] * shape["D"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    b, s, d = shape["B"], shape["S"], shape["D"]
    return float(size * b * s * d * (2 * shape["HQ"] + 2 * shape["HKV"]))

"""Style case `nw_layernorm_3pass`: LayerNorm over rows with separate mean and variance passes, fp16; returns (y, rstd)."""
from __future__ import annotations

import torch

NAME = "nw_layernorm_3pass"
DESCRIPTION = "LayerNorm over the last dim of an (M, N) matrix, the output and each row's 1/std, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"
SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 9, "N": 300, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "ln_passes.py"
FAMILY = "reduction"
EPS = 1e-5
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = (2.0 * torch.randn(shape["M"], shape["N"], generator=g, device=device) + 0.5).to(dt)
    w = torch.randn(shape["N"], generator=g, device=device).to(dt)
    b = torch.randn(shape["N"], generator=g, device=device).to(dt)
    return (x, w, b)


def reference(x, w, b):
    xf = x.float()
    var = xf.var(dim=-1, unbiased=False)
    y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), w.float(), b.float(), EPS)
    return y.to(x.dtype), torch.rsqrt(var + EPS)


def flops(shape):
    return 8.0 * shape["M"] * shape["N"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * 2 * shape["M"] * shape["N"] + 4 * shape["M"])

"""Style case `nw_rowquant_absmax`: per-row symmetric int8 quantization, fp16 in; returns (q, scale)."""
from __future__ import annotations

import torch

NAME = "nw_rowquant_absmax"
DESCRIPTION = "per-row int8 quantization by the row's absolute maximum, the codes and the scales, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch amax / round"
SHAPES = {"default": {"M": 8192, "N": 8192, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 11, "N": 330, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "absmax_quant.py"
FAMILY = "reduction"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = 3.0 * torch.randn(shape["M"], shape["N"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def reference(x):
    xf = x.float()
    scale = xf.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    q = torch.clamp(torch.round(xf / scale[:, None]), -127, 127).to(torch.int8)
    return q, scale

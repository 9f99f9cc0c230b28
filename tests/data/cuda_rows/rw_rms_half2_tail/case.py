"""Row-kernel test case `rw_rms_half2_tail`: RMSNorm over each row, fp16; half2 loads, shared tree down to 64 slots then warp shuffles."""
from __future__ import annotations

import torch

NAME = "rw_rms_half2_tail"
DESCRIPTION = "RMSNorm over each row, fp16; half2 loads, shared tree down to 64 slots then warp shuffles"
PLATFORM = "cuda"
REFERENCE_NAME = "torch rms_norm"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 410, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rms_half2.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape['dtype']]
    x = torch.randn(shape['M'], shape['N'], generator=g, device=device).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape['N'], generator=g, device=device)).to(dt)
    return (x, w)


def reference(x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + 1e-6) * w.float()
    return y.to(x.dtype)

"""Row-kernel test case `rw_gridstride_rms`: RMSNorm over each row, fp32; a fixed grid walks the rows."""
from __future__ import annotations

import torch

NAME = "rw_gridstride_rms"
DESCRIPTION = "RMSNorm over each row, fp32; a fixed grid walks the rows"
PLATFORM = "cuda"
REFERENCE_NAME = "torch rms_norm"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 8, "N": 203, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gs_rms.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape['M'], shape['N'], generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(shape['N'], generator=g, device=device)
    return (x, w)


def reference(x, w):
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6) * w

"""Row-kernel test case `rw_amax_volatile`: per-row absolute maximum / 127, fp32; templated unrolled tree with a volatile last warp."""
from __future__ import annotations

import torch

NAME = "rw_amax_volatile"
DESCRIPTION = "per-row absolute maximum / 127, fp32; templated unrolled tree with a volatile last warp"
PLATFORM = "cuda"
REFERENCE_NAME = "torch amax"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 7, "N": 1001, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "amax_scale.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return x.abs().amax(dim=1) / 127.0

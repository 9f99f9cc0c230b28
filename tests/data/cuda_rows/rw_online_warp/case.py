"""Row-kernel test case `rw_online_warp`: softmax over each fp32 row; one warp per row, the warps of a fixed grid walking the rows, each lane's online (max, sum) pair merged across the warp with xor shuffles."""
from __future__ import annotations

import torch

NAME = "rw_online_warp"
DESCRIPTION = "softmax over each fp32 row; a warp per row in a grid-stride loop over rows, online (max, sum) merged with xor shuffles"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.softmax"

SHAPES = {"default": {"M": 16384, "N": 1024, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 11, "N": 150, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "online_warp.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (3.0 * torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return torch.softmax(x.float(), dim=1)

"""Row-kernel test case `rw_online_lse`: log-sum-exp of each bf16 row into fp32; one pass keeping a running max and a base-2 rescaled sum per thread, the pairs merged in a shared tree whose step scales the sums in place."""
from __future__ import annotations

import torch

NAME = "rw_online_lse"
DESCRIPTION = "logsumexp of each bf16 row; online (max, sum) per thread, exp2f with a log2(e) scale, merged in a shared tree"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.logsumexp"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 7, "N": 389, "dtype": "bf16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "online_lse.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return ((4.0 * torch.randn(shape['M'], shape['N'], generator=g, device=device)).bfloat16(),)


def reference(x):
    return torch.logsumexp(x.float(), dim=1)

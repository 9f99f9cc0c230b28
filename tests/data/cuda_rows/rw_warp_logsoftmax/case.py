"""Row-kernel test case `rw_warp_logsoftmax`: log-softmax over each row, fp32; one warp per row, no shared memory."""
from __future__ import annotations

import torch

NAME = "rw_warp_logsoftmax"
DESCRIPTION = "log-softmax over each row, fp32; one warp per row, no shared memory"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.log_softmax"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 10, "N": 150, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "warp_logsoftmax.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (3.0 * torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return torch.log_softmax(x, dim=1)

"""Row-kernel test case `rw_cg_l2norm`: L2 normalization of each row, fp32; cooperative groups tiles and cg::reduce."""
from __future__ import annotations

import torch

NAME = "rw_cg_l2norm"
DESCRIPTION = "L2 normalization of each row, fp32; cooperative groups tiles and cg::reduce"
PLATFORM = "cuda"
REFERENCE_NAME = "torch normalize"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 300, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "cg_l2norm.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape['M'], shape['N'], generator=g, device=device),)


def reference(x):
    return torch.nn.functional.normalize(x, dim=1)

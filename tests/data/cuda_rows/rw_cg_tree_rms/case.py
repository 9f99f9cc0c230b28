"""Row-kernel test case `rw_cg_tree_rms`: RMSNorm over each fp16 row with weights; the block is a cooperative-groups thread_block whose rank and size index the row and whose sync() closes each step of a shared tree."""
from __future__ import annotations

import torch

NAME = "rw_cg_tree_rms"
DESCRIPTION = "RMSNorm of fp16 rows; cooperative-groups block rank / size / sync() around a shared tree"
PLATFORM = "cuda"
REFERENCE_NAME = "torch rms_norm"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 700, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "cg_tree_rms.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape['M'], shape['N'], generator=g, device=device).half()
    w = (1.0 + 0.1 * torch.randn(shape['N'], generator=g, device=device)).half()
    return (x, w)


def reference(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + 1e-5) * w.float()).half()

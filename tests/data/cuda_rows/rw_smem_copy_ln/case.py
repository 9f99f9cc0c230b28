"""Row-kernel test case `rw_smem_copy_ln`: LayerNorm of fp16 rows held in a shared buffer copied element by element."""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "rw_smem_copy_ln"
DESCRIPTION = "LayerNorm over the last dim, fp16, the row copied into shared memory by hand, eps 1e-5"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 2048, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 680, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "smem_ln.cu"
FAMILY = "norm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = (torch.randn(shape["M"], shape["N"], generator=g, device=device) * 2.0 - 0.3).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    b = (0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w, b)


def reference(x, w, b):
    if x.device.type == "cpu":
        return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

"""Row-kernel test case `rw_welford_ln`: LayerNorm over each row, bf16; Welford statistics merged with shuffles."""
from __future__ import annotations

import torch

NAME = "rw_welford_ln"
DESCRIPTION = "LayerNorm over each row, bf16; Welford statistics merged with shuffles"
PLATFORM = "cuda"
REFERENCE_NAME = "torch layer_norm"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 517, "dtype": "bf16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "welford_ln.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape['dtype']]
    x = (2.0 * torch.randn(shape['M'], shape['N'], generator=g, device=device) + 1.0).to(dt)
    gamma = (1.0 + 0.1 * torch.randn(shape['N'], generator=g, device=device)).to(dt)
    beta = (0.1 * torch.randn(shape['N'], generator=g, device=device)).to(dt)
    return (x, gamma, beta)


def reference(x, gamma, beta):
    y = torch.nn.functional.layer_norm(x.float(), (x.shape[1],), gamma.float(), beta.float(), 1e-5)
    return y.to(x.dtype)

"""Row-kernel test case `rw_welford_tree`: LayerNorm over each fp32 row with weight and bias; per-thread Welford (count, mean, M2) merged pairwise in a shared tree over three arrays."""
from __future__ import annotations

import torch

NAME = "rw_welford_tree"
DESCRIPTION = "LayerNorm of fp32 rows; Welford (count, mean, M2) per thread merged in a shared tree"
PLATFORM = "cuda"
REFERENCE_NAME = "torch layer_norm"

SHAPES = {"default": {"M": 8192, "N": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 5, "N": 333, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "welford_tree.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = 2.0 + torch.randn(shape['M'], shape['N'], generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(shape['N'], generator=g, device=device)
    b = 0.1 * torch.randn(shape['N'], generator=g, device=device)
    return (x, w, b)


def reference(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, 1e-5)

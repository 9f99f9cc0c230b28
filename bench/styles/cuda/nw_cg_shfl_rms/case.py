"""CUDA style case `nw_cg_shfl_rms`: RMSNorm, fp16, cooperative-groups tiles folding with `tile.shfl_down` in a loop, `__ldg` reads (experts.cudahost host)."""
from __future__ import annotations

import torch

NAME = "nw_cg_shfl_rms"
DESCRIPTION = "RMSNorm over the last dim of an (M, N) matrix with a weight, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "x * rsqrt(mean(x^2) + eps) * w"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 6, "N": 777, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "rms_tiles.cu"
FAMILY = "reduction"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)
    return (x.half(), w.half())


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return out.to(x.dtype)


def flops(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(2 * (2 * shape["M"] * shape["N"] + shape["N"]))

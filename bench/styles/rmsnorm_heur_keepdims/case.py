"""Style case `rmsnorm_heur_keepdims`: RMSNorm over a 2-D tile of rows, tiles from @triton.heuristics, fp16."""
from __future__ import annotations

import torch

NAME = "rmsnorm_heur_keepdims"
DESCRIPTION = "RMSNorm over a 2-D tile of rows, tiles from @triton.heuristics, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.rms_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 11, "N": 200, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "heur_rms.py"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w)


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    if x.device.type == "cpu":
        return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), 1e-6).to(x.dtype)
    return F.rms_norm(x, (x.shape[-1],), weight, 1e-6)


def flops(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * 2 * shape["M"] * shape["N"])

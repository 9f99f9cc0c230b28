"""Fresh CUDA style case `fr_layernorm_half2`: LayerNorm over each row, fp16; one warp per row, half2 loads, grid-stride over rows."""
from __future__ import annotations

import torch

NAME = "fr_layernorm_half2"
DESCRIPTION = "LayerNorm over each row, fp16; one warp per row, half2 loads, grid-stride over rows"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 11, "N": 250, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "ln_half2.cu"
FAMILY = "reduction"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    b = (0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w, b)


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.layer_norm(x.float(), (x.shape[1],), w.float(), b.float(), 1e-5)
    return y.to(x.dtype)


def bytes_moved(shape: dict) -> float:
    return float(2 * _SIZE[shape["dtype"]] * shape["M"] * shape["N"])

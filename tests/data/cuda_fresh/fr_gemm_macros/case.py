"""Fresh CUDA style case `fr_gemm_macros`: C = A @ B, fp16; 2-D thread tiles, #define macros and index helpers, guarded-temporary staging."""
from __future__ import annotations

import torch

NAME = "fr_gemm_macros"
DESCRIPTION = "C = A @ B, fp16; 2-D thread tiles, #define macros and index helpers, guarded-temporary staging"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 70, "N": 66, "K": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "hgemm_macros.cu"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return (a.float() @ b.float()).to(a.dtype)
    return a @ b


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    return float(_SIZE[shape["dtype"]] * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"]))

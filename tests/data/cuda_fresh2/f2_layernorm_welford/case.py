"""Fresh CUDA style case `f2_layernorm_welford`: layernorm with weight and bias, fp32; per-thread Welford, (count, mean, M2) merged in a shared tree."""
from __future__ import annotations

import torch

NAME = "f2_layernorm_welford"
DESCRIPTION = "layernorm with weight and bias, fp32; per-thread Welford, (count, mean, M2) merged in a shared tree"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.layer_norm"

SHAPES = {"default": {"R": 8192, "C": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"R": 6, "C": 999, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "ln_welford.cu"
FAMILY = "normalization"


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device),
            torch.randn(shape["C"], generator=g, device=device),
            torch.randn(shape["C"], generator=g, device=device))


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(),
                                          1e-5).float()


def bytes_moved(shape: dict) -> float:
    return float(8 * shape["R"] * shape["C"])

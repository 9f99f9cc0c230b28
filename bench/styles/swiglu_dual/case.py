"""Style case `swiglu_dual`: out = silu(x @ w_gate) * (x @ w_up), two products over one x tile."""
from __future__ import annotations

import torch

NAME = "swiglu_dual"
DESCRIPTION = "fused SwiGLU projection, two GEMMs sharing the activation tile, bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch: silu(x @ w_gate) * (x @ w_up) (two cuBLAS GEMMs and a fused elementwise)"

SHAPES = {"default": {"M": 4096, "K": 4096, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 70, "K": 100, "N": 48, "dtype": "fp16"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "swiglu.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    m, k, n = shape["M"], shape["K"], shape["N"]
    x = torch.randn(m, k, generator=g, device=device).to(dt)
    wg = (torch.randn(k, n, generator=g, device=device) / k ** 0.5).to(dt)
    wu = (torch.randn(k, n, generator=g, device=device) / k ** 0.5).to(dt)
    return (x, wg, wu)


def reference(x, w_gate, w_up):
    if x.device.type == "cpu":
        g = x.float() @ w_gate.float()
        u = x.float() @ w_up.float()
        return (torch.nn.functional.silu(g) * u).to(x.dtype)
    return torch.nn.functional.silu(x @ w_gate) * (x @ w_up)


def flops(shape: dict) -> float:
    return 4.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    return 2.0 * (shape["M"] * shape["K"] + 2 * shape["K"] * shape["N"] + shape["M"] * shape["N"])

"""The `trmm` workload: C = tril(A) @ B, a lower-triangular matrix times a dense one.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows. A is square
(M x M) and only its lower triangle, diagonal included, takes part; the entries above the
diagonal hold noise the product must ignore. B is M x N.
"""
from __future__ import annotations

import torch

NAME = "trmm"
DESCRIPTION = "triangular matrix product C = tril(A) @ B (BLAS trmm, left side, lower)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.tril then cuBLAS via torch.matmul"
# Why `klineage bench` leaves this case out of its headline geometric mean (the row stays).
HEADLINE_EXCLUDED = ("the expert has not reached its reference: it skips the product's blocks "
                     "above the diagonal, but its K loop masks every block with the triangle, "
                     "and cuBLAS's dense product of tril(A) runs at a higher rate than that loop")

# The device shape: half of a 4096^3 product is above the diagonal. The small shape (what the
# interpreter runs in seconds) fits the expert's first config, 128 x 128 x 64 tiles: two row
# blocks, the second partial, so both a full and a clipped diagonal block are exercised, and
# three column blocks, the last partial.
SHAPES = {"default": {"M": 4096, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 200, "N": 320, "dtype": "fp16"}}

TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}

EXPERTS = [("trmm_triton.py", "triton")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(a, b): a dense M x M matrix (its upper triangle is ignored, not zero) and an M x N one,
    standard normals drawn on `device` by a seeded generator."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["M"], generator=g, device=device).to(dtype=dt)
    b = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dtype=dt)
    return (a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu" and a.dtype in (torch.float16, torch.bfloat16):
        return (torch.tril(a.float()) @ b.float()).to(a.dtype)
    return torch.matmul(torch.tril(a), b)


def flops(shape: dict) -> float:
    """Multiply-adds of the lower triangle only (what a triangular product must do)."""
    m = shape["M"]
    return float(m * (m + 1) * shape["N"])


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    m, n = shape["M"], shape["N"]
    return float(size * (m * (m + 1) // 2 + 2 * m * n))

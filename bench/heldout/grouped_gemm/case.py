"""Held-out `grouped_gemm`: G independent products of different row counts in one call, as a
mixture-of-experts layer runs its experts: the rows of A are sorted by group,
`offsets[g]:offsets[g + 1]` are group g's rows, and out[rows of g] = A[rows of g] @ B[g].

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "grouped_gemm"
DESCRIPTION = "grouped GEMM (MoE style): out[off[g]:off[g+1]] = A[off[g]:off[g+1]] @ B[g], bf16"
PLATFORM = "cuda"
REFERENCE_NAME = ("torch._grouped_mm (one grouped kernel) on bf16 where the GPU has it (sm_90+), "
                  "else one torch.matmul per group")

# G groups over M_TOTAL rows; group sizes are uneven (see `group_sizes`), none a tile multiple.
SHAPES = {"default": {"G": 8, "M_TOTAL": 8192, "N": 2048, "K": 2048, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"G": 3, "M_TOTAL": 150, "N": 48, "K": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "grouped_start.py"
FAMILY = "gemm"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def group_sizes(shape: dict) -> list[int]:
    """Uneven row counts summing to M_TOTAL: weights 1, 2, ..., G scaled, remainder to the last.
    The same for every seed, so the timed work does not change between seeds."""
    g, total = shape["G"], shape["M_TOTAL"]
    weights = list(range(1, g + 1))
    sizes = [total * w // sum(weights) + 3 for w in weights[:-1]]
    sizes.append(total - sum(sizes))
    return sizes


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(a, b, offsets): a (M_TOTAL, K), b (G, K, N), offsets int32 (G + 1,) starting at 0."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M_TOTAL"], shape["K"], generator=gen, device=device).to(dt)
    b = torch.randn(shape["G"], shape["K"], shape["N"], generator=gen, device=device).to(dt)
    sizes = torch.tensor([0] + group_sizes(shape), dtype=torch.int64)
    offsets = torch.cumsum(sizes, 0).to(device=device, dtype=torch.int32)
    return (a, b, offsets)


def _grouped_kernel(a: torch.Tensor) -> bool:
    """The vendor's grouped GEMM applies: one launch, no copy of the offsets to the host. The
    per-group loop reads the offsets on the host, a synchronization that leaves the GPU idle
    while the host issues each group's product, so timing it times the host."""
    return (a.device.type == "cuda" and a.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm")
            and torch.cuda.get_device_capability(a.device) >= (9, 0))


def reference(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    if _grouped_kernel(a):
        # offs: each group's end row (offsets without its leading 0)
        return torch._grouped_mm(a, b, offs=offsets[1:].contiguous())
    bounds = offsets.tolist()
    out = torch.empty(a.shape[0], b.shape[2], dtype=a.dtype, device=a.device)
    for g in range(b.shape[0]):
        lo, hi = bounds[g], bounds[g + 1]
        if a.device.type == "cpu":
            out[lo:hi] = (a[lo:hi].float() @ b[g].float()).to(a.dtype)
        else:
            torch.matmul(a[lo:hi], b[g], out=out[lo:hi])
    return out


def flops(shape: dict) -> float:
    return 2.0 * shape["M_TOTAL"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    m, n, k, g = shape["M_TOTAL"], shape["N"], shape["K"], shape["G"]
    return float(size * (m * k + g * k * n + m * n))

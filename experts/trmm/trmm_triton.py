"""Expert Triton triangular product: C = tril(A) @ B, output in A's dtype.

`run(a, b)` reads only the lower triangle of the square A (the diagonal included). Expert
decisions, each a plain Triton idiom:
- the K loop of a row block stops at the block's last row: every key column past it lies above
  the diagonal for all of the block's rows, so about half of a dense product's blocks are never
  loaded (the loads of the diagonal block keep the triangle's mask);
- GROUP_M-swizzled tile order, so GROUP_M row blocks share each column block of B while in L2;
- tensor-core `tl.dot` accumulating in fp32;
- autotuned tile sizes, warps and pipelining depth (num_stages), the first config best
  measured. Under the interpreter (TRITON_INTERPRET=1) only the first config runs, exactly what
  a pinned kernel runs on the device.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _first_when_interpreted(configs: list[triton.Config], named_args: dict,
                            **kwargs) -> list[triton.Config]:
    return configs[:1] if _INTERPRET else configs


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=5),
    ],
    key=["M", "N"],
    prune_configs_by={"early_config_prune": _first_when_interpreted},
)
@triton.jit
def trmm_kernel(a_ptr, b_ptr, c_ptr, M, N,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # GROUP_M row blocks walk the column blocks together: B's tiles are reused from L2.
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Columns of A past the block's last row are above the diagonal for every row: stop there.
    for k0 in tl.range(0, tl.minimum(M, (pid_m + 1) * BLOCK_M), BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] >= ks[None, :]) & (rows[:, None] < M), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < M) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """tril(A) @ B in A's dtype (fp32 accumulation). Raises ValueError unless A is square
    (M x M) and B is M x N of A's dtype."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != a.shape[1] or b.shape[0] != a.shape[0]:
        raise ValueError(f"expected A (M, M) and B (M, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    M, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    trmm_kernel[grid](a, b, c, M, N, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1))
    return c

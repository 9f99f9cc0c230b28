"""Case mm. C = A @ B; the launch grid is a lambda of the meta-parameters that calls a
module-level helper with the tiles it reads from them."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_lh(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def tiles_of(m, n, bm, bn):
    return (triton.cdiv(m, bm), triton.cdiv(n, bn))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: tiles_of(M, N, META["BM"], META["BN"])  # noqa: E731
    mm_lh[grid](a, b, c, M, N, K, BM=32, BN=32, BK=32)
    return c

"""Tiles are module-level tl.constexpr globals read inside the kernel (no constexpr parameters);
one program per output tile on a 1-D grid."""
import torch
import triton
import triton.language as tl

BLOCK_ROWS = tl.constexpr(32)
BLOCK_COLS = tl.constexpr(32)
BLOCK_RED = tl.constexpr(32)


@triton.jit
def gmm_kernel(A, B, C, M, N, K, lda, ldb, ldc):
    pid = tl.program_id(axis=0)
    tiles_per_row = tl.cdiv(N, BLOCK_COLS)
    bi = pid // tiles_per_row
    bj = pid % tiles_per_row
    ri = bi * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    rj = bj * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    c = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_RED):
        rk = k0 + tl.arange(0, BLOCK_RED)
        a = tl.load(A + ri[:, None] * lda + rk[None, :], mask=(ri[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(B + rk[:, None] * ldb + rj[None, :], mask=(rk[:, None] < K) & (rj[None, :] < N), other=0.0)
        c += tl.dot(a, b)
    tl.store(C + ri[:, None] * ldc + rj[None, :], c.to(tl.float16), mask=(ri[:, None] < M) & (rj[None, :] < N))


def run(a, b):
    a = a.contiguous()
    b = b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    n_tiles = triton.cdiv(M, BLOCK_ROWS.value) * triton.cdiv(N, BLOCK_COLS.value)
    gmm_kernel[(n_tiles,)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
    return c

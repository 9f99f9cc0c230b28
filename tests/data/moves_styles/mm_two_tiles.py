"""Case mm. C = A @ B; each program computes two row tiles one after the other (an outer
`for t in range(2)` around the K loop), the grid's first axis counting pairs of tiles."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_pairs(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pair = tl.program_id(0)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    for t in range(2):
        rows = (pair * 2 + t) * BM + tl.arange(0, BM)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rows[:, None] * lda + (k + kk)[None, :],
                        mask=(rows[:, None] < M) & ((k + kk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + kk)[:, None] * ldb + cols[None, :],
                        mask=((k + kk)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * ldc + cols[None, :], acc.to(tl.float16),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 2 * 32), triton.cdiv(N, 32))
    mm_pairs[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=32, BN=32, BK=32)
    return c

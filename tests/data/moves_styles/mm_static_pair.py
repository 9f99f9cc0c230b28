"""Case mm. C = A @ B; each program computes two column tiles, unrolled with
`tl.static_range(2)` around the runtime K loop; the column tile index `2 * pid + t`."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_cols2(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    kk = tl.arange(0, BK)
    for t in tl.static_range(2):
        cols = (tl.program_id(1) * 2 + t) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rows[:, None] * K + (k + kk)[None, :],
                        mask=(rows[:, None] < M) & ((k + kk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + kk)[:, None] * N + cols[None, :],
                        mask=((k + kk)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(tl.float16),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm_cols2[(triton.cdiv(M, 32), triton.cdiv(N, 64))](a.contiguous(), b.contiguous(), c, M, N, K,
                                                       BM=32, BN=32, BK=32)
    return c

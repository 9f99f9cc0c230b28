"""Case mm. C = A @ B; the K loop is a `while` over a running offset, both pointers bumped by
a tile of their K stride each step, the K mask against what is left."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_while(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
             TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    rows = tl.program_id(0) * TM + tl.arange(0, TM)
    cols = tl.program_id(1) * TN + tl.arange(0, TN)
    ks = tl.arange(0, TK)
    pa = a_ptr + rows[:, None] * s_am + ks[None, :] * s_ak
    pb = b_ptr + ks[:, None] * s_bk + cols[None, :] * s_bn
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    k = 0
    while k < K:
        left = K - k
        a = tl.load(pa, mask=(rows[:, None] < M) & (ks[None, :] < left), other=0.0)
        b = tl.load(pb, mask=(ks[:, None] < left) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        pa += TK * s_ak
        pb += TK * s_bk
        k += TK
    tl.store(c_ptr + rows[:, None] * s_cm + cols[None, :] * s_cn, acc.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    mm_while[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                   c.stride(0), c.stride(1), TM=32, TN=32, TK=32)
    return c

"""Case w8mm. C = A @ (W * scale), int8 W with one fp16 scale per 32 rows of K and column; the
K loop counts tile steps and reads the scale row of step `kb` as `kb // (GROUP // BK)` (several
K tiles per group: BK must divide GROUP). The K loads are masked."""
import torch
import triton
import triton.language as tl


@triton.jit
def w8_quot(a_ptr, w_ptr, s_ptr, c_ptr, M, N, K, GROUP: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        kk = kb * BK + ok
        a = tl.load(a_ptr + om[:, None] * K + kk[None, :], mask=(om[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + kk[:, None] * N + on[None, :], mask=(kk[:, None] < K) & (on[None, :] < N), other=0)
        s = tl.load(s_ptr + (kb // (GROUP // BK)) * N + on, mask=on < N, other=0.0)
        acc += tl.dot(a, (w.to(tl.float32) * s[None, :].to(tl.float32)).to(tl.float16))
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16), mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, w, s):
    M, K = a.shape
    N = w.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    w8_quot[(triton.cdiv(M, 16), triton.cdiv(N, 32))](a, w, s, c, M, N, K, GROUP=32, BM=16, BN=32, BK=16)
    return c

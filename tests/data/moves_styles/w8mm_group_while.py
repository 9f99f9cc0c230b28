"""Case w8mm. C = A @ (W * scale), int8 W with one fp16 scale per 32 rows of K and column; the
K loop is a `while` over a running offset, one scale row per step (`k // GROUP`). The K loads
are masked: the K tile is bounds-checked, the scale row is not."""
import torch
import triton
import triton.language as tl


@triton.jit
def w8_while(a_ptr, w_ptr, s_ptr, c_ptr, M, N, K, GROUP: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k = 0
    while k < K:
        a = tl.load(a_ptr + om[:, None] * K + (k + ok)[None, :], mask=(om[:, None] < M) & ((k + ok)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + (k + ok)[:, None] * N + on[None, :], mask=((k + ok)[:, None] < K) & (on[None, :] < N), other=0)
        s = tl.load(s_ptr + (k // GROUP) * N + on, mask=on < N, other=0.0)
        acc += tl.dot(a, (w.to(tl.float32) * s[None, :].to(tl.float32)).to(tl.float16))
        k += BK
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16), mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, w, s):
    M, K = a.shape
    N = w.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    w8_while[(triton.cdiv(M, 16), triton.cdiv(N, 32))](a, w, s, c, M, N, K, GROUP=32, BM=16, BN=32, BK=32)
    return c

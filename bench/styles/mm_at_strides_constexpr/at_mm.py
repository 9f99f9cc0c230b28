"""C = A^T @ B where A is stored (K, M): the kernel reads A's transpose through its strides,
which it takes as constexpr (so each layout compiles its own kernel)."""
import torch
import triton
import triton.language as tl


@triton.jit
def at_matmul(a, b, c, M, N, K,
              S_AM: tl.constexpr, S_AK: tl.constexpr, S_BK: tl.constexpr, S_BN: tl.constexpr,
              S_CM: tl.constexpr, S_CN: tl.constexpr,
              TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    i = pm * TM + tl.arange(0, TM)
    j = pn * TN + tl.arange(0, TN)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for k0 in tl.range(0, K, TK):
        kk = k0 + tl.arange(0, TK)
        at = tl.load(a + i[:, None] * S_AM + kk[None, :] * S_AK,
                     mask=(i[:, None] < M) & (kk[None, :] < K), other=0.0)
        bt = tl.load(b + kk[:, None] * S_BK + j[None, :] * S_BN,
                     mask=(kk[:, None] < K) & (j[None, :] < N), other=0.0)
        acc += tl.dot(at, bt)
    tl.store(c + i[:, None] * S_CM + j[None, :] * S_CN, acc.to(c.dtype.element_ty),
             mask=(i[:, None] < M) & (j[None, :] < N))


def run(a, b):
    K, M = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    at = a.t()
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    at_matmul[grid](a, b, c, M, N, K, at.stride(0), at.stride(1), b.stride(0), b.stride(1),
                    c.stride(0), c.stride(1), TM=32, TN=32, TK=32)
    return c

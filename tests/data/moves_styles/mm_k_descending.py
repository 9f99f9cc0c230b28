"""Case mm. C = A @ B; the K loop counts blocks down (`range(tl.cdiv(K, BK), 0, -1)`), the
K offset of each step computed from the count; `tl.dot(a, b, acc)` positional."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_down(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for blocks_left in range(tl.cdiv(K, BK), 0, -1):
        k = (blocks_left - 1) * BK + tl.arange(0, BK)
        a = tl.load(A + m[:, None] * sam + k[None, :] * sak, mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(B + k[:, None] * sbk + n[None, :] * sbn, mask=(k[:, None] < K) & (n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + m[:, None] * scm + n[None, :] * scn, acc.to(tl.float16), mask=(m[:, None] < M) & (n[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm_down[(triton.cdiv(M, 32), triton.cdiv(N, 64))](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=32, BN=64, BK=16)
    return c

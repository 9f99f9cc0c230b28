"""Case bmm. C[b] = A[b] @ B[b]; a 3-D grid (column tiles, row tiles, batch): the batch is
program_id(2), the columns program_id(0); the batch offset cast to 64 bits."""
import torch
import triton
import triton.language as tl


@triton.jit
def bmm3(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pn = tl.program_id(0)
    pm = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_base = a_ptr + batch * sab
    b_base = b_ptr + batch * sbb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_base + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_base + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + batch * scb + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    Bt, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((Bt, M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(N, 32), triton.cdiv(M, 16), Bt)
    bmm3[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=16, BN=32, BK=32)
    return c

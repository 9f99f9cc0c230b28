"""C[b] = A[b] @ B[b]: the batch on the third grid axis, one 64 x 64 tile of C[b] per program."""
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_kernel(a, b, c, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    batch = tl.program_id(2).to(tl.int64)
    m = tl.program_id(0) * TM + tl.arange(0, TM)
    n = tl.program_id(1) * TN + tl.arange(0, TN)
    a += batch * sab
    b += batch * sbb
    c += batch * scb
    acc = tl.zeros((TM, TN), tl.float32)
    for k0 in range(0, K, TK):
        k = k0 + tl.arange(0, TK)
        x = tl.load(a + m[:, None] * sam + k[None, :] * sak, mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
        y = tl.load(b + k[:, None] * sbk + n[None, :] * sbn, mask=(k[:, None] < K) & (n[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + m[:, None] * scm + n[None, :] * scn, acc, mask=(m[:, None] < M) & (n[None, :] < N))


def run(A, B):
    batch, M, K = A.shape
    N = B.shape[2]
    C = torch.empty((batch, M, N), device=A.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64), batch)
    bmm_kernel[grid](A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(), TM=64, TN=64, TK=32)
    return C

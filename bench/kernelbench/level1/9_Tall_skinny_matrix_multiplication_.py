"""C = A @ B with A (M, N) tall and B (N, M) wide: the inner dimension is small, so each program
loads its whole K strip once (K padded to a power of two) and does one tl.dot."""
import torch
import triton
import triton.language as tl


@triton.jit
def outer_tile(A, B, C, M, P, K, lda, ldb, ldc, BLOCK: tl.constexpr, KP: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ks = tl.arange(0, KP)
    a = tl.load(A + rows[:, None] * lda + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
    b = tl.load(B + ks[:, None] * ldb + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < P), other=0.0)
    c = tl.dot(a, b)
    offs = rows[:, None].to(tl.int64) * ldc + cols[None, :]
    tl.store(C + offs, c, mask=(rows[:, None] < M) & (cols[None, :] < P))


def run(A, B):
    A, B = A.contiguous(), B.contiguous()
    M, K = A.shape
    P = B.shape[1]
    C = torch.empty((M, P), device=A.device, dtype=torch.float32)
    kp = max(16, triton.next_power_of_2(K))
    grid = (triton.cdiv(M, 64), triton.cdiv(P, 64))
    outer_tile[grid](A, B, C, M, P, K, A.stride(0), B.stride(0), C.stride(0), BLOCK=64, KP=kp)
    return C

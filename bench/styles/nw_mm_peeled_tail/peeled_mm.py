"""C = A @ B. The K loop walks only whole tiles with unmasked K (rows and columns still masked)
and the remainder, when K is not a multiple of the tile, is one masked step peeled after it;
grid axis 0 is the column block; the products accumulate through out_dtype=tl.float32."""
import torch
import triton
import triton.language as tl


@triton.jit
def peeled_matmul(A, B, C, M, N, K, lda, ldb, ldc,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    n_blk = tl.program_id(0)
    m_blk = tl.program_id(1)
    rm = m_blk * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = n_blk * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    row_ok = rm[:, None] < M
    col_ok = rn[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    whole = K // BLOCK_K
    for kb in range(whole):
        k = kb * BLOCK_K + rk
        a = tl.load(A + rm[:, None] * lda + k[None, :], mask=row_ok, other=0.0)
        b = tl.load(B + k[:, None] * ldb + rn[None, :], mask=col_ok, other=0.0)
        acc += tl.dot(a, b, out_dtype=tl.float32)
    if whole * BLOCK_K < K:
        k = whole * BLOCK_K + rk
        a = tl.load(A + rm[:, None] * lda + k[None, :], mask=row_ok & (k[None, :] < K), other=0.0)
        b = tl.load(B + k[:, None] * ldb + rn[None, :], mask=(k[:, None] < K) & col_ok, other=0.0)
        acc += tl.dot(a, b, out_dtype=tl.float32)
    tl.store(C + rm[:, None] * ldc + rn[None, :], acc.to(tl.float16), mask=row_ok & col_ok)


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    a = a.contiguous()
    b = b.contiguous()
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    peeled_matmul[(triton.cdiv(N, 32), triton.cdiv(M, 32))](a, b, c, M, N, K, a.stride(0), b.stride(0),
                                                            c.stride(0), BLOCK_M=32, BLOCK_N=32,
                                                            BLOCK_K=32)
    return c

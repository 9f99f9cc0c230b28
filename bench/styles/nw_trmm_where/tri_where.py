"""C = tril(A) @ B. Grid axis 0 walks the column blocks and axis 1 the row blocks; the K loop
counts blocks over all of A's columns and zeroes A's entries above the diagonal with tl.where
after loading the tile (the load masks only the bounds)."""
import torch
import triton
import triton.language as tl


@triton.jit
def tril_matmul(a_ptr, b_ptr, c_ptr, M, N, sa0, sa1, sb0, sb1, sc0, sc1,
                TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    col_blk = tl.program_id(0)
    row_blk = tl.program_id(1)
    i = row_blk * TM + tl.arange(0, TM)
    j = col_blk * TN + tl.arange(0, TN)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(M, TK)):
        kk = kb * TK + tl.arange(0, TK)
        a = tl.load(a_ptr + i[:, None] * sa0 + kk[None, :] * sa1,
                    mask=(i[:, None] < M) & (kk[None, :] < M), other=0.0)
        a = tl.where(kk[None, :] <= i[:, None], a, 0.0)
        b = tl.load(b_ptr + kk[:, None] * sb0 + j[None, :] * sb1,
                    mask=(kk[:, None] < M) & (j[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + i[:, None] * sc0 + j[None, :] * sc1, acc.to(c_ptr.dtype.element_ty),
             mask=(i[:, None] < M) & (j[None, :] < N))


def run(a, b):
    M, N = b.shape
    c = torch.empty((M, N), device=b.device, dtype=b.dtype)
    tril_matmul[(triton.cdiv(N, 32), triton.cdiv(M, 32))](
        a, b, c, M, N, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        TM=32, TN=32, TK=32)
    return c

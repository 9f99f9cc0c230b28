"""y = A @ x for A (M, K) and x (K, 1): each program owns a block of rows and walks K in
chunks, multiplying and summing along K."""
import torch
import triton
import triton.language as tl


@triton.jit
def gemv(A, X, Y, M, K, stride_am, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    acc = tl.zeros((ROWS,), dtype=tl.float32)
    row_ptr = A + r[:, None].to(tl.int64) * stride_am
    for k0 in range(0, K, COLS):
        c = k0 + tl.arange(0, COLS)
        a = tl.load(row_ptr + c[None, :], mask=(r[:, None] < M) & (c[None, :] < K), other=0.0)
        x = tl.load(X + c, mask=c < K, other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(Y + r, acc, mask=r < M)


def run(A, B):
    A = A.contiguous()
    M, K = A.shape
    x = B.reshape(-1).contiguous()
    y = torch.empty((M, 1), device=A.device, dtype=torch.float32)
    gemv[(triton.cdiv(M, 4),)](A, x, y, M, K, A.stride(0), ROWS=4, COLS=1024)
    return y

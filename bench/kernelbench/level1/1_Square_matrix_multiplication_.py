"""C = A @ B for square fp32 matrices: a tile of C per program, tl.dot over K in chunks."""
import torch
import triton
import triton.language as tl


@triton.jit
def square_mm(A, B, C, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * N + rk[None, :]
    b_ptrs = B + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(N, BK)):
        k_left = N - k * BK
        a = tl.load(a_ptrs, mask=(rm[:, None] < N) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < N) & (rn[None, :] < N))


def run(A, B):
    n = A.shape[0]
    A, B = A.contiguous(), B.contiguous()
    C = torch.empty((n, n), device=A.device, dtype=A.dtype)
    square_mm[(triton.cdiv(n, 64), triton.cdiv(n, 64))](A, B, C, n, BM=64, BN=64, BK=32, num_warps=4)
    return C

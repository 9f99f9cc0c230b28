"""C = A @ B.T with A (M, K) and B (N, K), both row-major: B's tile is read along K (its rows)
and transposed in registers before the dot."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_bt(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    om = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + ok
        a = tl.load(a_ptr + om[:, None] * K + k[None, :], mask=(om[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + on[:, None] * K + k[None, :], mask=(on[:, None] < N) & (k[None, :] < K), other=0.0)
        acc += tl.dot(a, tl.trans(b))
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc, mask=(om[:, None] < M) & (on[None, :] < N))


def run(A, B):
    A, B = A.contiguous(), B.contiguous()
    M, K = A.shape
    N = B.shape[0]
    C = torch.empty((M, N), device=A.device, dtype=torch.float32)
    mm_bt[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    return C

import torch
import triton
import triton.language as tl


@triton.jit
def mm_nt(A, B, C, M, N, K, lda, ldb, ldc, TILE: tl.constexpr, TILE_K: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    rows = i * TILE + tl.arange(0, TILE)
    cols = j * TILE + tl.arange(0, TILE)
    acc = tl.zeros((TILE, TILE), tl.float32)
    for kt in range(tl.cdiv(K, TILE_K)):
        ks = kt * TILE_K + tl.arange(0, TILE_K)
        a = tl.load(A + rows[:, None] * lda + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        bt = tl.load(B + cols[:, None] * ldb + ks[None, :], mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0)
        acc = tl.dot(a, tl.trans(bt), acc)
    tl.store(C + rows[:, None] * ldc + cols[None, :], acc.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(A, B):
    M, K = A.shape
    N = B.shape[0]
    C = torch.empty((M, N), dtype=torch.float16, device=A.device)
    mm_nt[(triton.cdiv(M, 32), triton.cdiv(N, 32))](A, B, C, M, N, K, A.stride(0), B.stride(0), C.stride(0),
                                                   TILE=32, TILE_K=32, num_warps=4)
    return C

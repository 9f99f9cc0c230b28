"""Split-K GEMM: a 1-D grid decomposed into (tile_m, tile_n, split); each program reduces its
share of K and adds it into a zeroed fp32 buffer with tl.atomic_add; the host casts afterwards."""
import torch
import triton
import triton.language as tl


@triton.jit
def splitk_gemm(a_ptr, b_ptr, acc_ptr, M, N, K, k_per_split,
                stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    split = pid % SPLITS
    tile = pid // SPLITS
    tile_m = tile // tiles_n
    tile_n = tile % tiles_n
    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < k_hi), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(kk[:, None] < k_hi) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.atomic_add(acc_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
                  mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    splits = 4
    bm, bn, bk = 32, 32, 32
    k_per_split = triton.cdiv(triton.cdiv(K, splits), bk) * bk
    acc = torch.zeros((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn) * splits,)
    splitk_gemm[grid](a, b, acc, M, N, K, k_per_split, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLITS=splits, num_warps=4)
    return acc.to(a.dtype)

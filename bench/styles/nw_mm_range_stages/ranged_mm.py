"""C = A @ B. The K loop counts tiles with `tl.range(0, k_tiles, num_stages=2)`; the operand
pointers are built once and advanced by a tile each step, the K tail masked against what is
left; offsets carry multiple_of / max_contiguous hints; the epilogue casts to fp16 by name."""
import torch
import triton
import triton.language as tl


@triton.jit
def ranged_matmul(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  TILE_M: tl.constexpr, TILE_N: tl.constexpr, TILE_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * TILE_M + tl.arange(0, TILE_M)
    offs_n = pid_n * TILE_N + tl.arange(0, TILE_N)
    offs_m = tl.max_contiguous(tl.multiple_of(offs_m, TILE_M), TILE_M)
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, TILE_N), TILE_N)
    offs_k = tl.arange(0, TILE_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    k_tiles = tl.cdiv(K, TILE_K)
    for kt in tl.range(0, k_tiles, num_stages=2):
        left = K - kt * TILE_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += TILE_K * stride_ak
        b_ptrs += TILE_K * stride_bk
    c = acc.to(tl.float16)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    ranged_matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), TILE_M=32, TILE_N=32, TILE_K=32)
    return c

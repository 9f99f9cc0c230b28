"""Batched C[i] = A[i] @ B[i]; 3-D grid, program_id(2) is the batch; grid is a def function."""
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               stride_ab, stride_am, stride_ak,
               stride_bb, stride_bk, stride_bn,
               stride_cb, stride_cm, stride_cn,
               TILE_M: tl.constexpr, TILE_N: tl.constexpr, TILE_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_b = tl.program_id(2)
    a_ptr += pid_b * stride_ab
    b_ptr += pid_b * stride_bb
    c_ptr += pid_b * stride_cb
    offs_m = pid_m * TILE_M + tl.arange(0, TILE_M)
    offs_n = pid_n * TILE_N + tl.arange(0, TILE_N)
    offs_k = tl.arange(0, TILE_K)
    acc = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for k0 in range(0, K, TILE_K):
        kk = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    nb, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((nb, M, N), device=a.device, dtype=a.dtype)

    def grid(meta):
        return (triton.cdiv(M, meta["TILE_M"]), triton.cdiv(N, meta["TILE_N"]), nb)

    bmm_kernel[grid](a, b, c, M, N, K,
                     a.stride(0), a.stride(1), a.stride(2),
                     b.stride(0), b.stride(1), b.stride(2),
                     c.stride(0), c.stride(1), c.stride(2),
                     TILE_M=32, TILE_N=32, TILE_K=32, num_warps=4)
    return c

"""Row sums of (a @ b) * alpha: a GEMM reading both operands through the strides the host
passes stores the product; a second kernel walks each row in chunks and sums it."""
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, alpha, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc * alpha
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def row_total(src, dst, width, row_stride, CHUNK: tl.constexpr):
    r = tl.program_id(0)
    part = tl.zeros((CHUNK,), tl.float32)
    for start in range(0, width, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        part += tl.load(src + r * row_stride + cols, mask=cols < width, other=0.0)
    tl.store(dst + r, tl.sum(part, axis=0))


def run(a, b, alpha):
    M, K = a.shape
    N = b.shape[1]
    prod = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_kernel[grid](a, b, prod, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        prod.stride(0), prod.stride(1), alpha, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    out = torch.empty((M,), device=a.device, dtype=torch.float32)
    row_total[(M,)](prod, out, N, prod.stride(0), CHUNK=64)
    return out

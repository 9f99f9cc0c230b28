"""Naive GEMM with block pointers: one TM x TN tile per program, K walked by tl.advance."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_bp_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                 stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_blk = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                              offsets=(pid_m * TM, 0), block_shape=(TM, TK), order=(1, 0))
    b_blk = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                              offsets=(0, pid_n * TN), block_shape=(TK, TN), order=(1, 0))
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, TK)):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_blk = tl.advance(a_blk, (0, TK))
        b_blk = tl.advance(b_blk, (TK, 0))
    c_blk = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                              offsets=(pid_m * TM, pid_n * TN), block_shape=(TM, TN), order=(1, 0))
    tl.store(c_blk, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


def run(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    mm_bp_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        TM=32, TN=32, TK=32)
    return c

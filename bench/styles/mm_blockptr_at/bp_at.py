"""C = A^T @ B with A stored (K, M): A^T is a block pointer over shape (M, K) with strides
(1, M) and order (0, 1); both operands walk K with `tl.advance`. Block pointers run on the
device only (Triton 3.9's interpreter removed them)."""
import torch
import triton
import triton.language as tl


@triton.jit
def bp_at_matmul(a_ptr, b_ptr, c_ptr, M, N, K, s_ak, s_am, s_bk, s_bn, s_cm, s_cn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    at_blk = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(s_am, s_ak),
                               offsets=(pid_m * BM, 0), block_shape=(BM, BK), order=(0, 1))
    b_blk = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(s_bk, s_bn),
                              offsets=(0, pid_n * BN), block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        x = tl.load(at_blk, boundary_check=(0, 1), padding_option="zero")
        y = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(x, y)
        at_blk = tl.advance(at_blk, (0, BK))
        b_blk = tl.advance(b_blk, (BK, 0))
    c_blk = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(s_cm, s_cn),
                              offsets=(pid_m * BM, pid_n * BN), block_shape=(BM, BN), order=(1, 0))
    tl.store(c_blk, acc.to(tl.float16), boundary_check=(0, 1))


def run(a, b):
    K, M = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    bp_at_matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                       c.stride(0), c.stride(1), BM=64, BN=64, BK=32, num_warps=4, num_stages=3)
    return c

"""Batched C[b] = A[b] @ B[b] read through 3-D in-kernel tensor descriptors (a block is one
batch's tile, reshaped to 2-D for the dot); the grid is (row tiles, column tiles, batch)."""
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_desc(a_ptr, b_ptr, c_ptr, BATCH, M, N, K,
             BLK_M: tl.constexpr, BLK_N: tl.constexpr, BLK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    bat = tl.program_id(2)
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[BATCH, M, K], strides=[M * K, K, 1],
                                    block_shape=[1, BLK_M, BLK_K])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[BATCH, K, N], strides=[K * N, N, 1],
                                    block_shape=[1, BLK_K, BLK_N])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[BATCH, M, N], strides=[M * N, N, 1],
                                    block_shape=[1, BLK_M, BLK_N])
    m0 = pid_m * BLK_M
    n0 = pid_n * BLK_N
    acc = tl.zeros((BLK_M, BLK_N), dtype=tl.float32)
    for k0 in range(0, K, BLK_K):
        x = a_d.load([bat, m0, k0]).reshape(BLK_M, BLK_K)
        y = b_d.load([bat, k0, n0]).reshape(BLK_K, BLK_N)
        acc = tl.dot(x, y, acc)
    c_d.store([bat, m0, n0], acc.to(tl.float16).reshape(1, BLK_M, BLK_N))


def run(a, b):
    a = a.contiguous()
    b = b.contiguous()
    batch, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((batch, M, N), device=a.device, dtype=a.dtype)
    if a.is_cuda:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64), batch)
    bmm_desc[grid](a, b, c, batch, M, N, K, BLK_M=64, BLK_N=64, BLK_K=32)
    return c

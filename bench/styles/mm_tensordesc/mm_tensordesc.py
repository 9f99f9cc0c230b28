"""Naive GEMM with tensor descriptors (the Triton 3.9 successor of block pointers):
one TM x TN tile per program, the K offset advanced by hand in the loop."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_td_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                 stride_am, stride_bk, stride_cm,
                 TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[TM, TK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[TK, TN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[TM, TN])
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    off_k = 0
    for _ in range(0, tl.cdiv(K, TK)):
        a = a_desc.load([pid_m * TM, off_k])
        b = b_desc.load([off_k, pid_n * TN])
        acc += tl.dot(a, b)
        off_k += TK
    c_desc.store([pid_m * TM, pid_n * TN], acc.to(c_ptr.dtype.element_ty))


def run(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if a.device.type == "cuda":
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    mm_td_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
        a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
        TM=32, TN=32, TK=32)
    return c

"""Case mm. C = A @ B; every tensor's strides passed as one tuple argument (`a.stride()`),
read as `sa[0]`, `sa[1]` in the kernel; pointers incremented in the K loop."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_tuple_strides(a_ptr, b_ptr, c_ptr, M, N, K, sa, sb, sc,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + om[:, None] * sa[0] + ok[None, :] * sa[1]
    b_ptrs = b_ptr + ok[:, None] * sb[0] + on[None, :] * sb[1]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(om[:, None] < M) & (ok[None, :] + k0 < K), other=0.0)
        b = tl.load(b_ptrs, mask=(ok[:, None] + k0 < K) & (on[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sa[1]
        b_ptrs += BLOCK_K * sb[0]
    tl.store(c_ptr + om[:, None] * sc[0] + on[None, :] * sc[1], acc.to(c_ptr.dtype.element_ty),
             mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 32))
    mm_tuple_strides[grid](a, b, c, M, N, K, a.stride(), b.stride(), c.stride(),
                           BLOCK_M=64, BLOCK_N=32, BLOCK_K=32)
    return c

"""C = A @ B; a 1-D grid whose program id is split row-major then remapped with tl.swizzle2d.
Offsets wrap with % (tutorial style) and carry multiple_of / max_contiguous hints."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_swizzled(a_ptr, b_ptr, c_ptr, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    pid_m, pid_n = tl.swizzle2d(pid // grid_n, pid % grid_n, grid_m, grid_n, GROUP)
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rm = tl.max_contiguous(tl.multiple_of(rm, BM), BM)
    rn = tl.max_contiguous(tl.multiple_of(rn, BN), BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak, mask=kk[None, :] < K, other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=kk[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    mm_swizzled[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1), BM=32, BN=32, BK=32, GROUP=4, num_warps=4)
    return c
